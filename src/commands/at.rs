//! Where a command acts: this registry, or the host `--host` or a `HOST:ID` names
//! (SPEC.md §12). Every command that acts on a session resolves it here and is
//! written once against the [`Location`].

use std::path::PathBuf;

use latch_client::{Client, ClientError, Found, Location, Receipt, There};

use super::hosts::Route;
use super::{load_receipt, open_for, parse_expect, parse_owner, usage};
use crate::cli::{Preconditions, TargetArgs};

/// A command's location, opened with its owner precondition.
pub(crate) struct At {
    here: Option<Client>,
    there: Option<There>,
    /// A host receipt's contents (its host taken out), which pin the creation.
    host_receipt: Option<Receipt>,
    /// The REF as given and without its `HOST:`.
    reference: Option<(String, String)>,
}

impl At {
    /// This registry (`--root`), or the route's host.
    pub(crate) fn open(
        root: Option<&PathBuf>,
        route: Option<&Route>,
        pre: &Preconditions,
    ) -> Result<Self, ClientError> {
        let Some(route) = route else {
            return Ok(Self {
                here: Some(open_for(root, pre)?),
                there: None,
                host_receipt: None,
                reference: None,
            });
        };
        let root = root
            .map(|p| {
                p.to_str()
                    .map(str::to_owned)
                    .ok_or_else(|| usage("--root is not UTF-8"))
            })
            .transpose()?;
        Ok(Self {
            here: None,
            there: Some(There {
                remote: crate::remote::remote(route.host()),
                root,
                owner: parse_owner(pre.owner.as_deref())?,
            }),
            host_receipt: route.receipt.clone(),
            reference: route.reference.clone(),
        })
    }

    /// This registry's client, as a bridge opened it for a command it serves,
    /// with the receipt the request carried (SPEC.md §12.2).
    pub(crate) fn served(client: Client, receipt: Option<Receipt>) -> Self {
        Self {
            here: Some(client),
            there: None,
            host_receipt: receipt,
            reference: None,
        }
    }

    /// The client of a command that runs where its registry is.
    pub(crate) fn here(&self) -> Result<&Client, ClientError> {
        self.here
            .as_ref()
            .ok_or_else(|| usage("this command runs on its session's host"))
    }

    pub(crate) fn loc(&self) -> Location<'_> {
        match (&self.here, &self.there) {
            (Some(c), _) => Location::Here(c),
            (None, Some(t)) => Location::There(t),
            (None, None) => unreachable!("an At is here or there"),
        }
    }

    /// The REF to resolve: without its `HOST:`.
    pub(crate) fn reference<'r>(&'r self, given: &'r str) -> &'r str {
        match &self.reference {
            Some((g, rest)) if g == given => rest,
            _ => given,
        }
    }

    /// The receipt the preconditions name: a host receipt's contents, else the
    /// `--receipt` file, checked against this registry.
    pub(crate) fn receipt(&self, pre: &Preconditions) -> Result<Option<Receipt>, ClientError> {
        if let Some(r) = &self.host_receipt {
            return Ok(Some(r.clone()));
        }
        match (&self.here, &pre.receipt) {
            (Some(client), Some(path)) => load_receipt(client, path).map(Some),
            _ => Ok(None),
        }
    }

    /// Resolves the target under `--expect` and the receipt.
    pub(crate) fn resolve(&self, target: &TargetArgs) -> Result<Found, ClientError> {
        self.resolve_ref(&target.reference, &target.pre)
    }

    pub(crate) fn resolve_ref(
        &self,
        reference: &str,
        pre: &Preconditions,
    ) -> Result<Found, ClientError> {
        let expect = parse_expect(pre)?;
        let receipt = self.receipt(pre)?;
        self.loc()
            .resolve(self.reference(reference), expect, receipt)
    }

    /// [`resolve`](Self::resolve) for a kill, recording `kill_requested`.
    pub(crate) fn resolve_for_kill(
        &self,
        target: &TargetArgs,
        signal: i32,
    ) -> Result<Found, ClientError> {
        let expect = parse_expect(&target.pre)?;
        let receipt = self.receipt(&target.pre)?;
        self.loc()
            .resolve_for_kill(self.reference(&target.reference), expect, receipt, signal)
    }

    /// A host receipt's contents (its host taken out), for a command routed by it.
    pub(crate) fn host_receipt(&self) -> Option<&Receipt> {
        self.host_receipt.as_ref()
    }

    /// Patches the creation the REF names, under its preconditions.
    pub(crate) fn patch(
        &self,
        reference: &str,
        pre: &Preconditions,
        patch: &latch_client::MetaPatch,
        exact_id: bool,
    ) -> Result<latch_client::Patched, ClientError> {
        let expect = parse_expect(pre)?;
        let receipt = self.receipt(pre)?;
        self.loc()
            .patch(self.reference(reference), expect, receipt, patch, exact_id)
    }

    /// Removes the creation the target names.
    pub(crate) fn remove(
        &self,
        target: &TargetArgs,
        force: bool,
    ) -> Result<(latch_wire::SessionRef, Option<latch_wire::Owner>), ClientError> {
        let expect = parse_expect(&target.pre)?;
        let receipt = self.receipt(&target.pre)?;
        self.loc()
            .remove(self.reference(&target.reference), expect, receipt, force)
    }

    /// Restarts the creation the target names.
    pub(crate) fn restart(
        &self,
        target: &TargetArgs,
        grace: std::time::Duration,
    ) -> Result<(latch_wire::SessionRef, latch_client::Created), ClientError> {
        let expect = parse_expect(&target.pre)?;
        let receipt = self.receipt(&target.pre)?;
        self.loc()
            .restart(self.reference(&target.reference), expect, receipt, grace)
    }

    /// Where the defaults that shaped an attach are: this registry's
    /// defaults.json, or the host's.
    pub(crate) fn defaults_file(&self) -> String {
        match (&self.here, &self.there) {
            (Some(c), _) => c
                .registry()
                .root()
                .join(latch_registry::DEFAULTS_FILE)
                .display()
                .to_string(),
            (_, Some(t)) => format!("the defaults.json of host {}", t.remote.host),
            _ => String::new(),
        }
    }

    /// The host's name, for another host's session.
    pub(crate) fn host_name(&self) -> Option<&str> {
        self.there.as_ref().map(|t| t.remote.host.as_str())
    }
}
