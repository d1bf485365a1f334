//! The only code of this crate that touches C: libpfm4's declarations,
//! written by hand from `perfmon/pfmlib.h` (libpfm 4.13, `LIBPFM_ABI_VERSION`
//! 0) for the few calls used, and one safe function per call. Every
//! `unsafe` block of the crate is here and says why it is sound.
//!
//! The structures carry a `size` field that libpfm checks against the sizes
//! it knows (`pfmlib_check_struct`): a libpfm with a different layout fails
//! the call with `PFM_ERR_INVAL` instead of writing past them. The sizes are
//! pinned by the tests below, against the header's `*_ABI0` constants.
//!
//! Without `libpfm.a` at build time (`cfg(libpfm)` unset by build.rs) the
//! calls are stubs: [`initialize`] fails with [`NOT_BUILT_IN`].

#[cfg(libpfm)]
use std::ffi::{c_char, c_int, c_void, CStr, CString};

/// `PFM_SUCCESS`.
pub(crate) const PFM_SUCCESS: i32 = 0;
/// `PFM_ERR_NOTFOUND`: no such event.
pub(crate) const PFM_ERR_NOTFOUND: i32 = -4;
/// Not a libpfm code: the crate was built without libpfm.a.
pub(crate) const NOT_BUILT_IN: i32 = -1000;
/// `PFM_PLM3`: count at privilege levels 1-3 (user mode on x86).
pub(crate) const PFM_PLM3: i32 = 0x08;
/// `PFM_OS_NONE`: encodings for the PMU registers themselves, no OS layer.
#[cfg(libpfm)]
const PFM_OS_NONE: c_int = 0;
/// `PFM_PMU_TYPE_CORE`.
pub(crate) const PFM_PMU_TYPE_CORE: i32 = 1;
/// `PFM_ATTR_UMASK`.
pub(crate) const PFM_ATTR_UMASK: i32 = 1;
/// `PFM_ATTR_MOD_BOOL`.
pub(crate) const PFM_ATTR_MOD_BOOL: i32 = 2;
/// `PFM_ATTR_MOD_INTEGER`.
pub(crate) const PFM_ATTR_MOD_INTEGER: i32 = 3;
/// PMU ids tried by [`pmu_info`] callers: `PFM_PMU_MAX` is 517 in libpfm
/// 4.13 and grows with each release; ids past it fail cheaply.
pub(crate) const PMU_ID_LIMIT: i32 = 1024;
/// The most codes one event encodes to (x86: the event select, plus an
/// extra register for offcore-response or load latency).
#[cfg(libpfm)]
const MAX_CODES: usize = 8;

/// `pfm_pmu_info_t`.
#[cfg(libpfm)]
#[repr(C)]
struct PmuInfoC {
    name: *const c_char,
    desc: *const c_char,
    size: usize,
    pmu: c_int,
    kind: c_int,
    nevents: c_int,
    first_event: c_int,
    max_encoding: c_int,
    num_cntrs: c_int,
    num_fixed_cntrs: c_int,
    /// is_present:1, is_dfl:1, reserved:30.
    flags: u32,
}

/// `pfm_event_info_t`.
#[cfg(libpfm)]
#[repr(C)]
struct EventInfoC {
    name: *const c_char,
    desc: *const c_char,
    equiv: *const c_char,
    size: usize,
    code: u64,
    pmu: c_int,
    dtype: c_int,
    idx: c_int,
    nattrs: c_int,
    reserved: c_int,
    flags: u32,
}

/// `pfm_event_attr_info_t`.
#[cfg(libpfm)]
#[repr(C)]
struct AttrInfoC {
    name: *const c_char,
    desc: *const c_char,
    equiv: *const c_char,
    size: usize,
    code: u64,
    kind: c_int,
    idx: c_int,
    ctrl: c_int,
    /// is_dfl:1, is_precise:1, is_speculative:2, support_hw_smpl:1, ...
    flags: u32,
    defaults: u64,
}

/// `pfm_pmu_encode_arg_t`.
#[cfg(libpfm)]
#[repr(C)]
struct EncodeArgC {
    codes: *mut u64,
    fstr: *mut *mut c_char,
    size: usize,
    count: c_int,
    idx: c_int,
}

#[cfg(libpfm)]
extern "C" {
    fn pfm_initialize() -> c_int;
    fn pfm_strerror(code: c_int) -> *const c_char;
    fn pfm_get_pmu_info(pmu: c_int, output: *mut PmuInfoC) -> c_int;
    fn pfm_get_event_next(idx: c_int) -> c_int;
    fn pfm_get_event_info(idx: c_int, os: c_int, output: *mut EventInfoC) -> c_int;
    fn pfm_get_event_attr_info(
        eidx: c_int,
        aidx: c_int,
        os: c_int,
        output: *mut AttrInfoC,
    ) -> c_int;
    fn pfm_get_os_event_encoding(
        s: *const c_char,
        dfl_plm: c_int,
        os: c_int,
        args: *mut c_void,
    ) -> c_int;
}

/// A PMU as `pfm_get_pmu_info` describes it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct RawPmu {
    pub(crate) id: i32,
    pub(crate) name: String,
    pub(crate) desc: String,
    pub(crate) kind: i32,
    pub(crate) nevents: i32,
    pub(crate) first_event: i32,
    pub(crate) num_cntrs: i32,
    pub(crate) num_fixed_cntrs: i32,
    pub(crate) present: bool,
    pub(crate) default: bool,
}

/// An event as `pfm_get_event_info` describes it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct RawEvent {
    pub(crate) name: String,
    pub(crate) desc: String,
    pub(crate) equiv: String,
    pub(crate) code: u64,
    pub(crate) pmu: i32,
    pub(crate) nattrs: i32,
}

/// An event attribute (unit mask or modifier).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct RawAttr {
    pub(crate) name: String,
    pub(crate) desc: String,
    pub(crate) code: u64,
    pub(crate) kind: i32,
    pub(crate) default: bool,
}

/// What `pfm_get_os_event_encoding` returned for an event string.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct RawEncoding {
    pub(crate) codes: Vec<u64>,
    pub(crate) fstr: String,
    pub(crate) idx: i32,
}

/// A C string owned by libpfm as a `String` (`""` for NULL).
///
/// # Safety
///
/// `p` is NULL or points to a NUL-terminated string that lives at least as
/// long as this call.
#[cfg(libpfm)]
unsafe fn text(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: non-NULL and NUL-terminated, per the function's contract.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// `pfm_initialize()`: its return code. Idempotent in libpfm (a second call
/// returns the first one's result); the caller still calls it once.
#[cfg(libpfm)]
pub(crate) fn initialize() -> i32 {
    // SAFETY: no arguments; libpfm reads its environment
    // (LIBPFM_FORCE_PMU, ...) and the CPU's identity, and builds its tables.
    unsafe { pfm_initialize() }
}

/// Without libpfm.a: always [`NOT_BUILT_IN`].
#[cfg(not(libpfm))]
pub(crate) fn initialize() -> i32 {
    NOT_BUILT_IN
}

/// libpfm's message for a return code.
#[cfg(libpfm)]
pub(crate) fn strerror(code: i32) -> String {
    if code == NOT_BUILT_IN {
        return "not built in".to_string();
    }
    // SAFETY: pfm_strerror returns a pointer to a static string for any code
    // (an "unknown error code" text for codes it does not know).
    unsafe { text(pfm_strerror(code)) }
}

/// Without libpfm.a, the one code there is.
#[cfg(not(libpfm))]
pub(crate) fn strerror(_code: i32) -> String {
    "not built in".to_string()
}

/// `pfm_get_pmu_info(id)`, if libpfm knows that id.
#[cfg(libpfm)]
pub(crate) fn pmu_info(id: i32) -> Option<RawPmu> {
    let mut out = PmuInfoC {
        name: std::ptr::null(),
        desc: std::ptr::null(),
        size: std::mem::size_of::<PmuInfoC>(),
        pmu: 0,
        kind: 0,
        nevents: 0,
        first_event: 0,
        max_encoding: 0,
        num_cntrs: 0,
        num_fixed_cntrs: 0,
        flags: 0,
    };
    // SAFETY: `out` is a valid pfm_pmu_info_t whose `size` tells libpfm how
    // much it may write; libpfm fills in pointers to its static tables.
    let r = unsafe { pfm_get_pmu_info(id, &mut out) };
    if r != PFM_SUCCESS {
        return None;
    }
    Some(RawPmu {
        id,
        // SAFETY: static strings of libpfm's PMU table (or NULL).
        name: unsafe { text(out.name) },
        // SAFETY: as above.
        desc: unsafe { text(out.desc) },
        kind: out.kind,
        nevents: out.nevents,
        first_event: out.first_event,
        num_cntrs: out.num_cntrs,
        num_fixed_cntrs: out.num_fixed_cntrs,
        present: out.flags & 1 != 0,
        default: out.flags & 2 != 0,
    })
}

/// Without libpfm.a: no PMU.
#[cfg(not(libpfm))]
pub(crate) fn pmu_info(_id: i32) -> Option<RawPmu> {
    None
}

/// `pfm_get_event_next(idx)`: the next event of the same PMU, -1 at the end.
#[cfg(libpfm)]
pub(crate) fn event_next(idx: i32) -> i32 {
    // SAFETY: plain integers; libpfm returns -1 for an invalid index.
    unsafe { pfm_get_event_next(idx) }
}

/// Without libpfm.a: the end.
#[cfg(not(libpfm))]
pub(crate) fn event_next(_idx: i32) -> i32 {
    -1
}

/// `pfm_get_event_info(idx, PFM_OS_NONE)`.
#[cfg(libpfm)]
pub(crate) fn event_info(idx: i32) -> Option<RawEvent> {
    let mut out = EventInfoC {
        name: std::ptr::null(),
        desc: std::ptr::null(),
        equiv: std::ptr::null(),
        size: std::mem::size_of::<EventInfoC>(),
        code: 0,
        pmu: 0,
        dtype: 0,
        idx: 0,
        nattrs: 0,
        reserved: 0,
        flags: 0,
    };
    // SAFETY: as for pmu_info: a sized output structure libpfm fills with
    // values and pointers into its static tables.
    let r = unsafe { pfm_get_event_info(idx, PFM_OS_NONE, &mut out) };
    if r != PFM_SUCCESS {
        return None;
    }
    Some(RawEvent {
        // SAFETY: static strings of libpfm's event table (or NULL).
        name: unsafe { text(out.name) },
        // SAFETY: as above.
        desc: unsafe { text(out.desc) },
        // SAFETY: as above.
        equiv: unsafe { text(out.equiv) },
        code: out.code,
        pmu: out.pmu,
        nattrs: out.nattrs,
    })
}

/// Without libpfm.a: no event.
#[cfg(not(libpfm))]
pub(crate) fn event_info(_idx: i32) -> Option<RawEvent> {
    None
}

/// `pfm_get_event_attr_info(eidx, aidx, PFM_OS_NONE)`.
#[cfg(libpfm)]
pub(crate) fn attr_info(eidx: i32, aidx: i32) -> Option<RawAttr> {
    let mut out = AttrInfoC {
        name: std::ptr::null(),
        desc: std::ptr::null(),
        equiv: std::ptr::null(),
        size: std::mem::size_of::<AttrInfoC>(),
        code: 0,
        kind: 0,
        idx: 0,
        ctrl: 0,
        flags: 0,
        defaults: 0,
    };
    // SAFETY: as for event_info.
    let r = unsafe { pfm_get_event_attr_info(eidx, aidx, PFM_OS_NONE, &mut out) };
    if r != PFM_SUCCESS {
        return None;
    }
    Some(RawAttr {
        // SAFETY: static strings of libpfm's tables (or NULL).
        name: unsafe { text(out.name) },
        // SAFETY: as above.
        desc: unsafe { text(out.desc) },
        code: out.code,
        kind: out.kind,
        default: out.flags & 1 != 0,
    })
}

/// Without libpfm.a: no attribute.
#[cfg(not(libpfm))]
pub(crate) fn attr_info(_eidx: i32, _aidx: i32) -> Option<RawAttr> {
    None
}

/// `pfm_get_os_event_encoding(event, PFM_PLM3, PFM_OS_NONE, ...)`: the
/// register values of `event` (user mode unless the string says `:k`), its
/// fully qualified name and index; `Err(code)` on failure.
#[cfg(libpfm)]
pub(crate) fn encode(event: &str) -> Result<RawEncoding, i32> {
    /// `PFM_ERR_INVAL`, for a name with a NUL byte.
    const PFM_ERR_INVAL: i32 = -2;
    let c_event = CString::new(event).map_err(|_| PFM_ERR_INVAL)?;
    let mut codes = [0u64; MAX_CODES];
    let mut fstr: *mut c_char = std::ptr::null_mut();
    let mut arg = EncodeArgC {
        codes: codes.as_mut_ptr(),
        fstr: &mut fstr,
        size: std::mem::size_of::<EncodeArgC>(),
        count: MAX_CODES as c_int,
        idx: 0,
    };
    // SAFETY: `arg` is a sized pfm_pmu_encode_arg_t; `codes` points to
    // `count` writable u64s that outlive the call (libpfm fails with
    // PFM_ERR_TOOSMALL rather than write more); `fstr` points to a NULL
    // pointer, which libpfm replaces with a string it mallocs (freed below).
    let r = unsafe {
        pfm_get_os_event_encoding(
            c_event.as_ptr(),
            PFM_PLM3,
            PFM_OS_NONE,
            (&mut arg as *mut EncodeArgC).cast::<c_void>(),
        )
    };
    // SAFETY: NULL or the NUL-terminated string libpfm allocated for us.
    let name = unsafe { text(fstr) };
    if !fstr.is_null() {
        // SAFETY: libpfm allocated it with malloc and handed it over; it is
        // not used after this.
        unsafe { libc::free(fstr.cast::<c_void>()) };
    }
    if r != PFM_SUCCESS {
        return Err(r);
    }
    let n = usize::try_from(arg.count).unwrap_or(0).min(MAX_CODES);
    Ok(RawEncoding {
        codes: codes[..n].to_vec(),
        fstr: name,
        idx: arg.idx,
    })
}

/// Without libpfm.a: never.
#[cfg(not(libpfm))]
pub(crate) fn encode(_event: &str) -> Result<RawEncoding, i32> {
    Err(NOT_BUILT_IN)
}

#[cfg(all(test, libpfm))]
mod tests {
    use super::*;

    #[test]
    fn struct_sizes_are_the_headers() {
        // PFM_PMU_INFO_ABI0, PFM_EVENT_INFO_ABI0, PFM_ATTR_INFO_ABI0,
        // PFM_RAW_ENCODE_ABI0 (64-bit).
        assert_eq!(std::mem::size_of::<PmuInfoC>(), 56);
        assert_eq!(std::mem::size_of::<EventInfoC>(), 64);
        assert_eq!(std::mem::size_of::<AttrInfoC>(), 64);
        assert_eq!(std::mem::size_of::<EncodeArgC>(), 32);
        assert_eq!(std::mem::offset_of!(PmuInfoC, flags), 52);
        assert_eq!(std::mem::offset_of!(EventInfoC, nattrs), 52);
        assert_eq!(std::mem::offset_of!(AttrInfoC, defaults), 56);
    }
}
