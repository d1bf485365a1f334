//! Links libpfm4's static archive (`libpfm.a`, Debian `libpfm4-dev`) when it
//! is there, and sets `cfg(libpfm)` so the crate uses it; without it the
//! crate builds a stub whose [`Library::open`] says libpfm4 is not built in,
//! so pfm still builds and runs (module names and raw codes keep working).
//!
//! `LIBPFM_A=/path/to/libpfm.a` picks another archive; `LIBPFM_A=none`
//! builds without libpfm4 on purpose.

use std::path::{Path, PathBuf};

/// Where Debian and other distributions put the archive.
const CANDIDATES: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/libpfm.a",
    "/usr/lib64/libpfm.a",
    "/usr/lib/libpfm.a",
    "/usr/local/lib/libpfm.a",
];

fn find() -> Option<PathBuf> {
    match std::env::var("LIBPFM_A") {
        Ok(v) if v == "none" => None,
        Ok(v) => Some(PathBuf::from(v)),
        Err(_) => CANDIDATES
            .iter()
            .map(Path::new)
            .find(|p| p.is_file())
            .map(Path::to_path_buf),
    }
}

fn main() {
    println!("cargo:rerun-if-env-changed=LIBPFM_A");
    println!("cargo::rustc-check-cfg=cfg(libpfm)");
    let found = find();
    // The archive in use; without one, every candidate, so that installing
    // libpfm4-dev rebuilds. (A candidate that is missing makes cargo rerun
    // this at every build, and relink pfm: only while none is found.)
    match &found {
        Some(archive) => println!("cargo:rerun-if-changed={}", archive.display()),
        None => CANDIDATES
            .iter()
            .for_each(|c| println!("cargo:rerun-if-changed={c}")),
    }
    match found {
        Some(archive) => {
            let dir = archive.parent().unwrap_or(Path::new("."));
            println!("cargo:rustc-link-search=native={}", dir.display());
            println!("cargo:rustc-link-lib=static=pfm");
            println!("cargo:rustc-cfg=libpfm");
        }
        None => println!(
            "cargo:warning=libpfm4: no libpfm.a (apt-get install libpfm4-dev, or make deps): \
             pfm is built without libpfm4 event names"
        ),
    }
}
