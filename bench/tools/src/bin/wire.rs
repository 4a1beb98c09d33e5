//! Wire codec micro-benchmarks and connection costs, printed as `key value` lines
//! for bench/run.sh.
//!
//! ```sh
//! latch-bench-wire                          # codec figures only
//! latch-bench-wire SOCKET ID INCARNATION    # + connect vs connect+HELLO+BIND
//! ```

use latch_wire::{AttachRequest};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use latch_wire::client::ClientHandshake;
use latch_wire::{
    ClientCodec, ClientFrame, Incarnation, Outbound, ServerCodec, ServerFrame, SessionId,
};

/// Encodes `n` copies of `frame` with the daemon's codec and decodes them with the
/// client's, in batches of 64; returns frames per second.
fn codec_rate(frame: &ServerFrame, budget: Duration) -> f64 {
    let mut server = ServerCodec::default();
    let mut client = ClientCodec::default();
    let mut buf = BytesMut::with_capacity(4 << 20);
    let item = Outbound::Strict(frame.clone());
    let mut frames = 0u64;
    let t = Instant::now();
    while t.elapsed() < budget {
        for _ in 0..64 {
            server.encode_outbound(&item, &mut buf).expect("encode");
        }
        for _ in 0..64 {
            let f = client
                .decode_server(&mut buf)
                .expect("decode")
                .expect("frame");
            std::hint::black_box(f);
        }
        frames += 64;
    }
    frames as f64 / t.elapsed().as_secs_f64()
}

fn client_rate(frame: &ClientFrame, budget: Duration) -> f64 {
    let mut client = ClientCodec::default();
    let mut server = ServerCodec::default();
    let mut buf = BytesMut::with_capacity(1 << 20);
    let mut frames = 0u64;
    let t = Instant::now();
    while t.elapsed() < budget {
        for _ in 0..64 {
            client.encode_client(frame, &mut buf).expect("encode");
        }
        for _ in 0..64 {
            let f = server
                .decode_inbound(&mut buf)
                .expect("decode")
                .expect("frame");
            std::hint::black_box(f);
        }
        frames += 64;
    }
    frames as f64 / t.elapsed().as_secs_f64()
}

fn recv(stream: &mut UnixStream, codec: &mut ClientCodec, buf: &mut BytesMut) -> ServerFrame {
    loop {
        if let Some(f) = codec.decode_server(buf).expect("decode") {
            return f;
        }
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).expect("read");
        assert!(n > 0, "daemon closed the connection");
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    let i = ((v.len() - 1) as f64 * p).round() as usize;
    v[i]
}

fn main() {
    let budget = Duration::from_millis(700);
    let big = ServerFrame::Output(Bytes::from(vec![
        b'x';
        latch_wire::limits::MAX_OUTPUT_CHUNK
    ]));
    let small = ServerFrame::Output(Bytes::from_static(b"a"));
    let r = codec_rate(&big, budget);
    println!("codec_output32k_frames_per_s {r:.0}");
    println!(
        "codec_output32k_mb_per_s {:.0}",
        r * latch_wire::limits::MAX_OUTPUT_CHUNK as f64 / 1e6
    );
    println!(
        "codec_output1_frames_per_s {:.0}",
        codec_rate(&small, budget)
    );
    let input = ClientFrame::Input(Bytes::from_static(b"a"));
    println!(
        "codec_input1_frames_per_s {:.0}",
        client_rate(&input, budget)
    );

    let args: Vec<String> = std::env::args().collect();
    let [_, socket, id, inc] = &args[..] else {
        return;
    };
    let id: SessionId = id.parse().expect("id");
    let inc: Incarnation = inc.parse().expect("incarnation");
    let n = 300;
    let mut plain = Vec::with_capacity(n);
    let mut bound = Vec::with_capacity(n);
    for _ in 0..n {
        // A plain connect: the daemon accepts and checks the peer's uid.
        let t = Instant::now();
        let s = UnixStream::connect(socket).expect("connect");
        plain.push(t.elapsed().as_secs_f64() * 1e6);
        drop(s);

        let t = Instant::now();
        let mut s = UnixStream::connect(socket).expect("connect");
        let mut codec = ClientCodec::default();
        let mut buf = BytesMut::new();
        let hs = ClientHandshake::default();
        let mut out = BytesMut::new();
        codec.encode_client(&hs.hello(), &mut out).expect("hello");
        codec
            .encode_client(
                &ClientFrame::Bind {
                    id: id.clone(),
                    incarnation: inc,
                },
                &mut out,
            )
            .expect("bind");
        // HELLO and BIND pipelined in one write, as the client library may do.
        s.write_all(&out).expect("write");
        let welcome = recv(&mut s, &mut codec, &mut buf);
        hs.on_welcome(welcome).expect("welcome");
        match recv(&mut s, &mut codec, &mut buf) {
            ServerFrame::Bound { .. } => {}
            f => panic!("not bound: {f:?}"),
        }
        bound.push(t.elapsed().as_secs_f64() * 1e6);
    }
    // Keystroke echo through the daemon alone (no CLI client): attach read-write,
    // then type one byte and wait for its echo from the program (cat, cooked mode),
    // erase it, and again.
    let mut s = UnixStream::connect(socket).expect("connect");
    let mut codec = ClientCodec::default();
    let mut buf = BytesMut::new();
    let hs = ClientHandshake::default();
    let mut out = BytesMut::new();
    codec.encode_client(&hs.hello(), &mut out).expect("hello");
    codec
        .encode_client(
            &ClientFrame::Bind {
                id,
                incarnation: inc,
            },
            &mut out,
        )
        .expect("bind");
    codec
        .encode_client(
            &ClientFrame::Attach(AttachRequest {
                rows: 24,
                cols: 80,
                read_only: false,
            }),
            &mut out,
        )
        .expect("attach");
    s.write_all(&out).expect("write");
    // Up to the SCREEN, then let the program settle.
    loop {
        if let ServerFrame::Screen(_) = recv(&mut s, &mut codec, &mut buf) {
            break;
        }
    }
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    let mut drain = [0u8; 65536];
    while let Ok(n) = s.read(&mut drain) {
        if n == 0 {
            break;
        }
    }
    buf.clear();
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut echo = Vec::with_capacity(200);
    for i in 0..200u8 {
        let ch = b'a' + i % 26;
        let mut out = BytesMut::new();
        codec
            .encode_client(&ClientFrame::Input(Bytes::copy_from_slice(&[ch])), &mut out)
            .expect("input");
        let t = Instant::now();
        s.write_all(&out).expect("write");
        loop {
            if let ServerFrame::Output(b) = recv(&mut s, &mut codec, &mut buf) {
                if b.contains(&ch) {
                    break;
                }
            }
        }
        echo.push(t.elapsed().as_secs_f64() * 1e6);
        let mut out = BytesMut::new();
        codec
            .encode_client(&ClientFrame::Input(Bytes::from_static(b"\x7f")), &mut out)
            .expect("input");
        s.write_all(&out).expect("write");
        loop {
            if let ServerFrame::Output(b) = recv(&mut s, &mut codec, &mut buf) {
                if b.contains(&8) {
                    break;
                }
            }
        }
    }
    println!("daemon_echo_p50_us {:.1}", percentile(&mut echo, 0.5));
    println!("daemon_echo_p99_us {:.1}", percentile(&mut echo, 0.99));
    println!("connect_p50_us {:.1}", percentile(&mut plain, 0.5));
    println!("connect_p99_us {:.1}", percentile(&mut plain, 0.99));
    println!("hello_bind_p50_us {:.1}", percentile(&mut bound, 0.5));
    println!("hello_bind_p99_us {:.1}", percentile(&mut bound, 0.99));
}
