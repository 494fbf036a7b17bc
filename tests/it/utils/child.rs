//! A spawned process that cannot outlive its test: a failing assertion unwinds through `Drop`,
//! which kills and reaps it, so no gateway or simulator is left holding ports after a panic.

use std::ops::{Deref, DerefMut};
use std::process::Child;

pub struct KillOnDrop(Option<Child>);

impl KillOnDrop {
    pub fn new(child: Child) -> Self {
        Self(Some(child))
    }

    /// Hands the process back to be waited on; the caller owns its end from here.
    pub fn into_inner(mut self) -> Child {
        self.0.take().expect("present until dropped")
    }
}

impl Deref for KillOnDrop {
    type Target = Child;
    fn deref(&self) -> &Child {
        self.0.as_ref().expect("present until dropped")
    }
}

impl DerefMut for KillOnDrop {
    fn deref_mut(&mut self) -> &mut Child {
        self.0.as_mut().expect("present until dropped")
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
