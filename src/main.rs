#![forbid(unsafe_code)]

// Many small allocations per request (headers, JSON, Redis frames): mimalloc serves them
// faster than glibc's malloc; the A/B is in BENCHMARKS.md.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    if let Err(e) = slackgate::cli::main() {
        eprintln!("slackgate: {e:#}");
        std::process::exit(2);
    }
}
