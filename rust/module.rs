// SPDX-License-Identifier: GPL-2.0

//! Module references: what keeps this module's text loaded while an
//! object that calls into it lives.

use kernel::bindings;

/// One reference on a module (`try_module_get`), put when dropped.
///
/// # Invariants
///
/// `0` is a module this value holds a reference on.
pub(crate) struct ModuleRef(*mut bindings::module);

// SAFETY: A module reference may be put from any thread.
unsafe impl Send for ModuleRef {}
// SAFETY: Nothing is reachable through a shared `ModuleRef`.
unsafe impl Sync for ModuleRef {}

impl ModuleRef {
    /// A reference on `module`, or `None` if it is being unloaded.
    ///
    /// # Safety
    ///
    /// `module` is a live module (this one, whose code is running).
    pub(crate) unsafe fn try_get(module: *mut bindings::module) -> Option<Self> {
        // SAFETY: The caller's guarantee.
        // INVARIANT: the reference is held on success.
        unsafe { bindings::try_module_get(module) }.then_some(Self(module))
    }
}

impl Drop for ModuleRef {
    fn drop(&mut self) {
        // SAFETY: The reference this value holds (type invariant).
        unsafe { bindings::module_put(self.0) };
    }
}
