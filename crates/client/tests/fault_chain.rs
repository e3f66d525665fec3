//! Page protection installs a SIGSEGV handler; faults that are not Lodestore's must still end
//! the program as they would have. Each case runs in a child process (this test binary, run
//! again with an environment variable naming the case) and the parent checks how it died.

use lodestore_client::detect::protection::{os_page_bytes, FaultMechanism, ProtectedArena};
use std::os::unix::process::ExitStatusExt;
use std::process::Command;

const CASE_VARIABLE: &str = "LODESTORE_FAULT_CHAIN_CASE";

/// Runs `case` in a child process; returns its exit status and standard error.
fn run_child(case: &str) -> (std::process::ExitStatus, String) {
    let output = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_entry_point",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CASE_VARIABLE, case)
        .output()
        .unwrap();
    (
        output.status,
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// In a child: makes a protected arena (installing the handler), then misbehaves.
#[test]
fn child_entry_point() {
    let Ok(case) = std::env::var(CASE_VARIABLE) else {
        return; // Run as a normal test: nothing to do.
    };
    let _arena = ProtectedArena::new(os_page_bytes(), 4, FaultMechanism::Signal).unwrap();
    match case.as_str() {
        "stray-write" => {
            // A read-only page that is not Lodestore's.
            // SAFETY: a fresh anonymous mapping; no memory of ours is touched.
            let page = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    os_page_bytes(),
                    libc::PROT_READ,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            assert_ne!(page, libc::MAP_FAILED);
            // SAFETY: none: the write to a read-only page is the point, and must kill this
            // child process with SIGSEGV (the parent checks it did).
            unsafe { std::ptr::write_volatile(page as *mut u8, 1) };
            eprintln!("survived a write to a read-only page");
        }
        "stack-overflow" => {
            #[allow(unconditional_recursion)]
            fn recurse(depth: u64) -> u64 {
                let buffer = [depth; 64];
                std::hint::black_box(&buffer);
                recurse(depth + 1) + std::hint::black_box(buffer[3])
            }
            std::thread::spawn(|| recurse(0)).join().ok();
            eprintln!("survived a stack overflow");
        }
        other => panic!("unknown case {other}"),
    }
    std::process::exit(0);
}

#[test]
fn a_stray_write_outside_every_arena_still_kills_the_process() {
    let (status, stderr) = run_child("stray-write");
    assert_eq!(status.signal(), Some(libc::SIGSEGV), "{status:?}: {stderr}");
    assert!(!stderr.contains("survived"), "{stderr}");
}

#[test]
fn a_stack_overflow_is_still_reported_by_the_runtime() {
    let (status, stderr) = run_child("stack-overflow");
    assert!(status.signal().is_some(), "{status:?}: {stderr}");
    assert!(stderr.contains("overflowed its stack"), "{stderr}");
}
