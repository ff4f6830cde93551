//! `leasesim`: the harness's command line. Run it as `cargo sim <verb> ...`.

fn main() {
    std::process::exit(leasesim_sim::cli::main());
}
