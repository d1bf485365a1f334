//! pfm-gen: writes pfm's man pages and shell completions from the same
//! clap declarations as the tool (`make man` runs it).
//!
//! usage: pfm-gen DIR   (DIR/pfm.1, DIR/pfm-stat.1, DIR/pfm-record.1,
//!                       DIR/pfm-report.1, DIR/pfm-list.1,
//!                       DIR/pfm-info.1, DIR/completions/{pfm.bash,_pfm,pfm.fish})

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap_complete::Shell;

fn write_man(cmd: &clap::Command, path: &Path) -> std::io::Result<()> {
    let mut buf = Vec::new();
    clap_mangen::Man::new(cmd.clone()).render(&mut buf)?;
    std::fs::write(path, buf)
}

fn generate(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    std::fs::create_dir_all(dir.join("completions"))?;
    let mut cmd = pfm_cli::command();
    cmd.build();
    let top = dir.join("pfm.1");
    write_man(&cmd, &top)?;
    written.push(top);
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        // Pages of subcommands are named as git's are: pfm-stat(1). clap
        // takes names as &'static str; this one-shot program leaks three.
        let name: &'static str = Box::leak(format!("pfm-{}", sub.get_name()).into_boxed_str());
        let page = sub.clone().name(name);
        let path = dir.join(format!("{name}.1"));
        write_man(&page, &path)?;
        written.push(path);
    }
    for (shell, file) in [
        (Shell::Bash, "pfm.bash"),
        (Shell::Zsh, "_pfm"),
        (Shell::Fish, "pfm.fish"),
    ] {
        let path = dir.join("completions").join(file);
        let mut buf = Vec::new();
        clap_complete::generate(shell, &mut pfm_cli::command(), "pfm", &mut buf);
        std::fs::write(&path, buf)?;
        written.push(path);
    }
    Ok(written)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [dir] = args.as_slice() else {
        eprintln!("usage: pfm-gen DIR");
        return ExitCode::from(2);
    };
    match generate(Path::new(dir)) {
        Ok(files) => {
            for f in files {
                println!("{}", f.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("pfm-gen: cannot write into {dir}: {e}");
            ExitCode::from(1)
        }
    }
}
