//! `out!`, the commands' `println!` — the CLI's and the simulator's alike, so that neither
//! borrows it from the other.

/// `println!` for the commands: a closed pipe (`slackgate deliveries | head`) ends the command
/// quietly, as it does any Unix tool, instead of panicking on the write.
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = writeln!(std::io::stdout(), $($t)*) {
            $crate::out::stdout_closed(e)
        }
    }};
}
pub(crate) use out;

/// The end of a command whose standard output went away.
pub(crate) fn stdout_closed(e: std::io::Error) -> ! {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    eprintln!("cannot write the output: {e}");
    std::process::exit(1)
}
