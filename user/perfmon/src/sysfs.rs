//! `/sys/kernel/perfmon/`: what the module says about itself.

use std::path::{Path, PathBuf};

/// The module's sysfs directory.
pub const SYSFS_DIR: &str = "/sys/kernel/perfmon";

/// The module parameters' directory.
pub const PARAMS_DIR: &str = "/sys/module/perfmon/parameters";

/// What `/sys/kernel/perfmon/` shows; a field is `None` when its file is
/// missing or unreadable.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SysInfo {
    /// `abi_version`.
    pub abi_version: Option<u32>,
    /// `pmu_model`.
    pub pmu_model: Option<String>,
    /// `live_contexts`: open contexts.
    pub live_contexts: Option<u64>,
    /// `zombie_contexts`: contexts whose fd was closed while attached.
    pub zombie_contexts: Option<u64>,
    /// `vector`: the overflow interrupt vector (0 if none).
    pub vector: Option<u32>,
    /// Module parameter `pmu`, from `/sys/module/perfmon/parameters`.
    pub param_pmu: Option<String>,
    /// Module parameter `soft_width`.
    pub param_soft_width: Option<u32>,
}

/// Reads a sysfs attribute as a trimmed string.
pub fn read_attr(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// Parses a number as sysfs prints it: decimal, or hex with `0x`.
pub fn parse_num(s: &str) -> Option<u64> {
    let s = s.trim();
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

impl SysInfo {
    /// Whether the module's sysfs directory exists (the module is loaded).
    pub fn present() -> bool {
        Path::new(SYSFS_DIR).is_dir()
    }

    /// Reads the default directories.
    pub fn read() -> Self {
        Self::read_from(Path::new(SYSFS_DIR), Path::new(PARAMS_DIR))
    }

    /// Reads `dir` (and `params` for the module parameters).
    pub fn read_from(dir: &Path, params: &Path) -> Self {
        let attr = |name: &str| read_attr(&dir.join(name));
        let num = |name: &str| attr(name).as_deref().and_then(parse_num);
        let param = |name: &str| read_attr(&params.join(name));
        SysInfo {
            abi_version: num("abi_version").and_then(|v| u32::try_from(v).ok()),
            pmu_model: attr("pmu_model"),
            live_contexts: num("live_contexts"),
            zombie_contexts: num("zombie_contexts"),
            vector: num("vector").and_then(|v| u32::try_from(v).ok()),
            param_pmu: param("pmu"),
            param_soft_width: param("soft_width")
                .as_deref()
                .and_then(parse_num)
                .and_then(|v| u32::try_from(v).ok()),
        }
    }
}

/// The path of attribute `name` under [`SYSFS_DIR`].
pub fn attr_path(name: &str) -> PathBuf {
    Path::new(SYSFS_DIR).join(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_numbers() {
        assert_eq!(parse_num("12\n"), Some(12));
        assert_eq!(parse_num("0xec"), Some(0xec));
        assert_eq!(parse_num("soft"), None);
    }

    #[test]
    fn reads_a_directory() {
        let dir = std::env::temp_dir().join(format!("pfm-sysfs-test-{}", std::process::id()));
        let params = dir.join("params");
        std::fs::create_dir_all(&params).unwrap();
        std::fs::write(dir.join("abi_version"), "1\n").unwrap();
        std::fs::write(dir.join("pmu_model"), "soft\n").unwrap();
        std::fs::write(dir.join("live_contexts"), "2\n").unwrap();
        std::fs::write(dir.join("vector"), "236\n").unwrap();
        std::fs::write(params.join("soft_width"), "16\n").unwrap();
        let s = SysInfo::read_from(&dir, &params);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(s.abi_version, Some(1));
        assert_eq!(s.pmu_model.as_deref(), Some("soft"));
        assert_eq!(s.live_contexts, Some(2));
        assert_eq!(s.zombie_contexts, None);
        assert_eq!(s.vector, Some(236));
        assert_eq!(s.param_soft_width, Some(16));
        assert_eq!(s.param_pmu, None);
    }
}
