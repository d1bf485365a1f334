//! `pfm`: per-thread performance counters from the command line, in the
//! habits of `perf stat`, through `/dev/perfmon`. See `pfm --help`,
//! `man pfm` (`make man`) and Documentation/pfm.rst.

fn main() -> std::process::ExitCode {
    pfm_cli::main()
}
