// SPDX-License-Identifier: GPL-2.0

//! Which ABI structures the ioctls copy from and to user memory as bytes:
//! `FromBytes` for those read from user space (any bit pattern is a valid
//! value: every field is checked after the copy), `AsBytes` for those
//! written back (no padding, so no kernel bytes leak).

use kernel::types::{AsBytes, FromBytes};

use crate::abi;

// SAFETY: The ABI structures are `repr(C)` integers and integer arrays with
// explicit padding fields: every bit pattern is valid and none has padding.
unsafe impl FromBytes for abi::PfmPmc {}
// SAFETY: See above.
unsafe impl AsBytes for abi::PfmPmc {}
// SAFETY: See above.
unsafe impl FromBytes for abi::PfmPmd {}
// SAFETY: See above.
unsafe impl AsBytes for abi::PfmPmd {}
// SAFETY: See above.
unsafe impl FromBytes for abi::PfmRegsArg {}
// SAFETY: See above.
unsafe impl AsBytes for abi::PfmRegsArg {}
// SAFETY: See above.
unsafe impl FromBytes for abi::PfmLoad {}
// SAFETY: See above.
unsafe impl FromBytes for abi::PfmClone {}
// SAFETY: See above.
unsafe impl FromBytes for abi::PfmSmplSetup {}
// SAFETY: See above.
unsafe impl FromBytes for abi::PfmCtxFlags {}
// SAFETY: See above.
unsafe impl AsBytes for abi::PfmCtxInfo {}
// SAFETY: See above.
unsafe impl AsBytes for abi::PfmThread {}
// SAFETY: See above.
unsafe impl FromBytes for abi::PfmThreadsArg {}
// SAFETY: See above.
unsafe impl AsBytes for abi::PfmThreadsArg {}
// SAFETY: See above.
unsafe impl AsBytes for abi::PfmInfo {}
// SAFETY: See above.
unsafe impl AsBytes for abi::PfmMsg {}
// SAFETY: See above.
unsafe impl FromBytes for abi::PfmSetsArg {}
// SAFETY: See above.
unsafe impl AsBytes for abi::PfmSetsArg {}
// SAFETY: See above.
unsafe impl FromBytes for abi::PfmSetdesc {}
// SAFETY: See above.
unsafe impl AsBytes for abi::PfmSetdesc {}
// SAFETY: See above.
unsafe impl FromBytes for abi::PfmSetinfo {}
// SAFETY: See above.
unsafe impl AsBytes for abi::PfmSetinfo {}
// SAFETY: See above.
unsafe impl FromBytes for abi::PfmValues {}
// SAFETY: See above.
unsafe impl AsBytes for abi::PfmValues {}
