//! The layers of docs/ARCHITECTURE.md, checked against the dependency graph: every crate of
//! the workspace depends (outside its tests) only on workspace crates of a lower rank in the
//! table there. A new crate must be given a rank before this passes.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

fn workspace_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .and_then(Path::parent)
        .expect("crates/cli sits two levels below the workspace root")
}

/// The rank of each crate, from the table after the "layer order" marker.
fn ranks() -> HashMap<String, u32> {
    let text = std::fs::read_to_string(workspace_root().join("docs/ARCHITECTURE.md")).unwrap();
    let table = text
        .split("<!-- layer order")
        .nth(1)
        .expect("docs/ARCHITECTURE.md has the layer order table");
    let mut ranks = HashMap::new();
    for line in table.lines().skip(1) {
        let line = line.trim();
        if line.is_empty() && !ranks.is_empty() {
            break;
        }
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        let Ok(rank) = cells[0].parse::<u32>() else {
            continue; // the header and its rule
        };
        for name in cells[1].split(',') {
            assert!(
                ranks.insert(name.trim().to_string(), rank).is_none(),
                "{name} ranked twice"
            );
        }
    }
    assert!(
        ranks.len() >= 10,
        "the layer table is incomplete: {ranks:?}"
    );
    ranks
}

#[test]
fn every_crate_depends_only_on_lower_layers() {
    let ranks = ranks();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(workspace_root())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let metadata: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let members: Vec<&serde_json::Value> =
        metadata["packages"].as_array().unwrap().iter().collect();
    let mut wrong = Vec::new();
    for package in &members {
        let name = package["name"].as_str().unwrap();
        let rank = *ranks
            .get(name)
            .unwrap_or_else(|| panic!("{name} has no rank in docs/ARCHITECTURE.md"));
        for dependency in package["dependencies"].as_array().unwrap() {
            let target = dependency["name"].as_str().unwrap();
            // Tests and build scripts may reach anywhere; only what ships is layered.
            if !dependency["kind"].is_null() {
                continue;
            }
            if let Some(&below) = ranks.get(target) {
                if below >= rank {
                    wrong.push(format!(
                        "{name} (rank {rank}) depends on {target} (rank {below})"
                    ));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "dependencies against the layers:\n{}",
        wrong.join("\n")
    );
    assert_eq!(
        members.len(),
        ranks.len(),
        "crates ranked but not in the workspace"
    );
}
