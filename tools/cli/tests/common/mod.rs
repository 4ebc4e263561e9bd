//! What the command-line tests share: running `switchboard` as a user would, and temporary
//! input files.

use std::path::PathBuf;
use std::process::Command;

/// Runs `switchboard` from the repository root: (success, stdout, stderr).
pub fn run(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .args(args)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .output()
        .expect("run switchboard");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Writes `text` to a file named `name` (extension included) in the temporary directory,
/// unique to this test process.
pub fn temp(name: &str, text: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("switchboard-cli-{}-{name}", std::process::id()));
    std::fs::write(&path, text).unwrap();
    path
}
