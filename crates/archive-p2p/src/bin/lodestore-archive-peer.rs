//! An archive peer on its own (`lodestore archive-peer` does the same from the CLI): the
//! program the DHT tests and benchmarks start as processes.

use clap::Parser;
use lodestore_archive_p2p::PeerArgs;

/// A peer of a Lodestore snapshot archive DHT: holds page records in DIR.
#[derive(Parser)]
#[command(version)]
struct Cli {
    #[command(flatten)]
    peer: PeerArgs,
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match lodestore_archive_p2p::peer::run(&cli.peer) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
