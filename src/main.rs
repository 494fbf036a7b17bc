#![forbid(unsafe_code)]

fn main() {
    if let Err(e) = slackgate::cli::main() {
        eprintln!("slackgate: {e:#}");
        std::process::exit(2);
    }
}
