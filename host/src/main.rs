//! The `wasmctrl` command line.

fn main() -> std::process::ExitCode {
    wasmctrl::tools::cli::main()
}
