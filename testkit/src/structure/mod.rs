//! The structure of the source tree, checked rather than described: the
//! modules of every level form layers (no import cycle among siblings),
//! and no source file outside tests is too long to read whole. Both read
//! the sources as text (comments and literals blanked), as a reviewer
//! would, so they need no compiler and report file and line.

mod code;
mod cycles;
mod length;
mod paths;
mod tree;

#[cfg(test)]
mod tests;

pub use cycles::{Cycle, Edge, sibling_cycles};
pub use length::{LongFile, MAX_LINES, long_files};
