//! Fuzz target: the server's frame reader and request decoder on arbitrary bytes must return
//! an error or a value, never panic or allocate without bound. Run with
//! `cargo fuzz run frame_decoder` from the repository root (cargo-fuzz, nightly).
#![no_main]

use libfuzzer_sys::fuzz_target;
use lodestore_net::frame::read_frame;
use lodestore_net::message::{decode, Request, Response};

fuzz_target!(|data: &[u8]| {
    let mut input = data;
    // Frames one after another, as a connection would deliver them.
    while let Ok(frame) = read_frame(&mut input) {
        let _ = decode::<Request>(&frame.body);
        let _ = decode::<Response>(&frame.body);
    }
    let _ = decode::<Request>(data);
});
