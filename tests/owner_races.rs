//! Owner preconditions against same-id replacement (modelled on
//! tests/races.rs). Project A has lost its files: it knows no incarnation, only its
//! owner. Its patch (by id, owner precondition only), tag and kill (resolved by id)
//! and `gc --owner A --abandoned` race "remove A's session, create B's under the same
//! id" (B's working directory is gone too, so only the owner keeps gc off it). None
//! may ever touch B. Real daemons, real processes, random timing.

// Pids read back from JSON records always fit; the casts are checked by the kernel.
#![allow(clippy::cast_possible_truncation)]

mod support;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use latch_client::{Client, ClientError, GcOptions, MetaPatch, NewSession};
use latch_wire::{Owner, SessionId, SessionRef};
use support::{alive, Reg, Rng};

/// Creates `cat` under `id` owned by `owner`, in a fresh directory that is then
/// removed (so `gc --abandoned` would stop it, but for the owner).
fn new_cat(client: &Client, id: &SessionId, owner: &Owner, dir: &Path) -> SessionRef {
    std::fs::create_dir_all(dir).unwrap();
    let mut n = NewSession::default();
    n.id = Some(id.clone());
    n.command = vec!["cat".into()];
    n.cwd = Some(dir.to_path_buf());
    n.owner = Some(owner.clone());
    let c = client.create(n).expect("create");
    std::fs::remove_dir(dir).unwrap();
    SessionRef::new(c.id, c.incarnation)
}

#[test]
fn owner_preconditions_never_reach_a_replacement_owned_by_another_project() {
    let rounds: usize = std::env::var("LATCH_RACE_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100);
    let reg = Reg::new();
    let base = reg.root.parent().unwrap().to_path_buf();
    let (owner_a, owner_b) = (Owner::new("A").unwrap(), Owner::new("B").unwrap());
    let bin = support::latch_bin();
    let client_a = Arc::new(
        Client::open(&reg.root, bin.into())
            .unwrap()
            .with_owner(Some(owner_a.clone())),
    );
    let client_b = Arc::new(
        Client::open(&reg.root, bin.into())
            .unwrap()
            .with_owner(Some(owner_b.clone())),
    );
    let id = SessionId::new("race").unwrap();
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    println!("owner race seed {seed}");
    let mut rng = Rng(seed);
    let (mut reached_a, mut refused, mut reached_b) = (0usize, 0usize, 0usize);
    for round in 0..rounds {
        let a = new_cat(&client_a, &id, &owner_a, &base.join(format!("a{round}")));
        // Random start offsets vary the interleaving from round to round; they order
        // nothing. Every outcome is then read from the record, events and processes.
        // The replacer starts within 4 ms; the operations within 30 ms, so they land
        // before, during and after the replacement (which takes several ms).
        let delays: Vec<Duration> = (0..5)
            .map(|k| rng.micros(if k == 0 { 4_000 } else { 30_000 }))
            .collect();

        let replacer = {
            let (ca, cb) = (Arc::clone(&client_a), Arc::clone(&client_b));
            let (a, owner_b) = (a.clone(), owner_b.clone());
            let dir = base.join(format!("b{round}"));
            let d = delays[0];
            std::thread::spawn(move || {
                std::thread::sleep(d);
                // A's session goes (by whichever of us gets there), then B's comes.
                for _ in 0..10 {
                    let _ = ca.kill(&a, libc::SIGKILL, Some(Duration::from_secs(5)));
                    match ca.remove(&a, latch_client::RemoveMode::ExitedOnly) {
                        Ok(()) | Err(ClientError::Replaced { .. }) => break,
                        Err(_) => continue,
                    }
                }
                new_cat(&cb, &a.id, &owner_b, &dir)
            })
        };
        let mut ops = Vec::new();
        for (k, d) in delays[1..].iter().copied().enumerate() {
            let client = Arc::clone(&client_a);
            let id = id.clone();
            ops.push(std::thread::spawn(
                move || -> Result<(usize, Vec<String>), ClientError> {
                    std::thread::sleep(d);
                    match k {
                        // By id, no incarnation: only the owner check under the lock
                        // keeps this off B.
                        0 => {
                            let p = MetaPatch {
                                display_name: Some(Some("patched-by-A".into())),
                                ..MetaPatch::default()
                            };
                            client.patch(&id, None, &p).map(|_| (1, Vec::new()))
                        }
                        // `latch tag race owner=A --owner A`.
                        1 => {
                            let t = client.resolve(id.as_str(), None)?;
                            let mut p = MetaPatch::default();
                            p.tags.insert("tagged-by".into(), Some("A".into()));
                            client
                                .patch(&t.session.id, Some(&t.session.incarnation), &p)
                                .map(|_| (1, Vec::new()))
                        }
                        // `latch kill race --owner A`.
                        2 => {
                            let t = client.resolve(id.as_str(), None)?;
                            client
                                .kill(&t.session, libc::SIGTERM, None)
                                .map(|_| (1, Vec::new()))
                        }
                        // `gc --owner A --abandoned`: the number of sessions it acted on.
                        _ => {
                            let mut o = GcOptions::default();
                            o.abandoned_cwd = true;
                            o.grace = Duration::from_secs(1);
                            let reports = client.gc(&o)?;
                            let acted = reports
                                .iter()
                                .filter(|r| {
                                    matches!(
                                        r.action,
                                        latch_client::GcAction::StoppedAndRemoved
                                            | latch_client::GcAction::Removed
                                    )
                                })
                                .count();
                            Ok((
                                acted,
                                reports.into_iter().filter_map(|r| r.incarnation).collect(),
                            ))
                        }
                    }
                },
            ));
        }
        let outcomes: Vec<Result<(usize, Vec<String>), ClientError>> =
            ops.into_iter().map(|t| t.join().unwrap()).collect();
        let b = replacer.join().unwrap();
        let mut hits = Vec::new();
        for o in &outcomes {
            match o {
                Ok((n, seen)) => {
                    if seen.contains(&b.incarnation.to_string()) {
                        hits.push("gc --owner A considered B's session");
                    }
                    if *n == 0 {
                        refused += 1;
                    }
                    reached_a += n;
                }
                Err(
                    ClientError::NotOwner { .. }
                    | ClientError::Replaced { .. }
                    | ClientError::NotFound(_)
                    | ClientError::Unreachable { .. }
                    | ClientError::Busy(_),
                ) => refused += 1,
                Err(e) => panic!("round {round}: unexpected error {e}"),
            }
        }
        // B is untouched: its record, its process, its events.
        assert_ne!(a.incarnation, b.incarnation);
        let rec = client_b
            .registry()
            .read_record(&id)
            .unwrap()
            .expect("B's record");
        assert_eq!(rec.incarnation, b.incarnation, "round {round}");
        assert_eq!(rec.owner.as_ref(), Some(&owner_b), "round {round}");
        if rec.display_name.is_some() {
            hits.push("A's patch reached B");
        }
        if !rec.tags.is_empty() {
            hits.push("A's tag reached B");
        }
        if rec.exit.is_some() || !alive(rec.child.pid) {
            hits.push("A's kill or gc reached B's program");
        }
        let b_events: Vec<String> = client_b
            .registry()
            .read_events(&id)
            .unwrap()
            .into_iter()
            .filter(|e| e.incarnation() == Some(b.incarnation.to_string()))
            .map(|e| e.type_name().to_owned())
            .collect();
        if b_events != ["session_start"] {
            hits.push("an event other than session_start for B");
        }
        if !hits.is_empty() {
            eprintln!("round {round}: {hits:?}; B's events {b_events:?}");
            reached_b += hits.len();
        }
        let mut conn = client_b.connect(&b).expect("B answers");
        let st = conn.status().unwrap();
        assert_eq!(st.incarnation, b.incarnation);
        assert_eq!(st.owner.as_ref(), Some(&owner_b));
        drop(conn);
        client_b
            .kill(&b, libc::SIGKILL, Some(Duration::from_secs(5)))
            .unwrap();
        client_b
            .remove(&b, latch_client::RemoveMode::ExitedOnly)
            .unwrap();
    }
    println!(
        "owner races: {rounds} rounds, {reached_a} actions reached A's sessions, {refused} refused, {reached_b} reached B's"
    );
    assert_eq!(reached_b, 0, "actions aimed at A reached B's session");
    assert!(
        reached_a > 0,
        "no action ever reached A: the race tests nothing"
    );
}
