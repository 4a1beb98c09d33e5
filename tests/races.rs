//! Races against same-id replacement: a patch, a kill and a tag update
//! aimed at creation A race "remove A, create B under the same id"; none may ever
//! touch B. Real daemons, real processes, random timing.

// Pids read back from JSON records always fit; the casts are checked by the kernel.
#![allow(clippy::cast_possible_truncation)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use latch_client::{Client, ClientError, MetaPatch, NewSession};
use latch_wire::{SessionId, SessionRef};
use support::{alive, Reg, Rng};

fn new_cat(client: &Client, id: &SessionId) -> SessionRef {
    let mut n = NewSession::default();
    n.id = Some(id.clone());
    n.command = vec!["cat".into()];
    let c = client.create(n).expect("create");
    SessionRef::new(c.id, c.incarnation)
}

#[test]
fn operations_aimed_at_a_never_touch_its_replacement() {
    let rounds: usize = std::env::var("LATCH_RACE_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    let reg = Reg::new();
    let client = Arc::new(Client::open(&reg.root, support::latch_bin().into()).unwrap());
    let id = SessionId::new("race").unwrap();
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    println!("race seed {seed}");
    let mut rng = Rng(seed);
    let (mut hit_a, mut refused) = (0usize, 0usize);
    for round in 0..rounds {
        let a = new_cat(&client, &id);
        // Random start offsets vary the interleaving from round to round; they order
        // nothing. Every outcome is then read from the record and the processes.
        let delays: Vec<Duration> = (0..4).map(|_| rng.micros(3000)).collect();

        let replacer = {
            let client = Arc::clone(&client);
            let a = a.clone();
            let d = delays[0];
            std::thread::spawn(move || {
                std::thread::sleep(d);
                client
                    .kill(&a, libc::SIGKILL, Some(Duration::from_secs(5)))
                    .expect("kill A");
                client
                    .remove(&a, latch_client::RemoveMode::ExitedOnly)
                    .expect("rm A");
                new_cat(&client, &a.id)
            })
        };
        let mut ops = Vec::new();
        for (k, d) in delays[1..].iter().copied().enumerate() {
            let client = Arc::clone(&client);
            let a = a.clone();
            ops.push(std::thread::spawn(move || -> Result<(), ClientError> {
                std::thread::sleep(d);
                match k {
                    0 => {
                        let p = MetaPatch {
                            display_name: Some(Some("patched-for-A".into())),
                            ..MetaPatch::default()
                        };
                        client.patch(&a.id, Some(&a.incarnation), &p).map(|_| ())
                    }
                    1 => {
                        let mut p = MetaPatch::default();
                        p.tags.insert("owner".into(), Some("A".into()));
                        client.patch(&a.id, Some(&a.incarnation), &p).map(|_| ())
                    }
                    _ => client.kill(&a, libc::SIGTERM, None).map(|_| ()),
                }
            }));
        }
        let outcomes: Vec<Result<(), ClientError>> =
            ops.into_iter().map(|t| t.join().unwrap()).collect();
        let b = replacer.join().unwrap();
        for o in &outcomes {
            match o {
                Ok(()) => hit_a += 1,
                Err(
                    ClientError::Replaced { .. }
                    | ClientError::NotFound(_)
                    | ClientError::Unreachable { .. }
                    | ClientError::Busy(_),
                ) => refused += 1,
                Err(e) => panic!("round {round}: unexpected error {e}"),
            }
        }
        // B is untouched: its record, its process, its files.
        assert_ne!(a.incarnation, b.incarnation);
        let rec = client
            .registry()
            .read_record(&id)
            .unwrap()
            .expect("B's record");
        assert_eq!(rec.incarnation, b.incarnation, "round {round}");
        assert_eq!(rec.display_name, None, "round {round}: A's patch reached B");
        assert!(
            rec.tags.is_empty(),
            "round {round}: A's tag reached B: {:?}",
            rec.tags
        );
        assert!(rec.exit.is_none(), "round {round}: B exited");
        assert!(
            alive(rec.child.pid),
            "round {round}: A's kill reached B's program"
        );
        let mut conn = client.connect(&b).expect("B answers");
        assert_eq!(conn.status().unwrap().incarnation, b.incarnation);
        drop(conn);
        client
            .kill(&b, libc::SIGKILL, Some(Duration::from_secs(5)))
            .unwrap();
        client
            .remove(&b, latch_client::RemoveMode::ExitedOnly)
            .unwrap();
    }
    println!(
        "races: {rounds} rounds, {hit_a} operations reached A, {refused} refused, 0 reached B"
    );
}
