//! `leasesim`: the harness's command line. Run it as `cargo sim <verb> ...`.

// The binary's allocator (the library and its tests keep the system's): a
// campaign is allocation-heavy, and mimalloc is markedly faster than glibc's
// malloc at it. Allocation addresses never reach scheduling decisions, so
// runs are the same, hash for hash.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    std::process::exit(leasesim_sim::cli::main());
}
