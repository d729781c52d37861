//! What a backend says about its device.

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceType {
    Integrated,
    Discrete,
    Virtual,
    Cpu,
    Other,
}

/// Memory the device can use, in bytes. On APUs and CPUs, `unified` is true and
/// `device_local` is the shared pool, not a small aperture.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryInfo {
    pub device_local: u64,
    pub host_visible: u64,
    pub unified: bool,
    /// Whether buffers are mapped into host memory directly (no staging copies).
    pub zero_copy: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceInfo {
    /// Registry name of the backend: "cpu", "vulkan", …
    pub backend: String,
    pub name: String,
    pub vendor: String,
    pub device_type: DeviceType,
    /// Architecture where one is known (gfx1151, sm_90, x86_64).
    pub arch: Option<String>,
    pub memory: MemoryInfo,
    /// Smallest and largest subgroup width; empty when subgroup operations are unavailable.
    pub subgroup_sizes: Vec<u32>,
    /// Whether kernels that declare the subgroup capability run here.
    pub subgroup_ops: bool,
    /// Whether a kernel that declares a subgroup width (`Capabilities::subgroup_width`) within
    /// `subgroup_sizes` runs with exactly that width, where the device has several: Vulkan's
    /// required subgroup size (VK_EXT_subgroup_size_control, core in 1.3), as RADV offers 32
    /// and 64 on RDNA. Elsewhere only the device's one width serves.
    #[serde(default)]
    pub subgroup_width_pinned: bool,
    pub f16: bool,
    pub int8: bool,
    /// Whether kernels with matrix tiles (`trine_ir::TileOp`: 16×16×16, f16 operands, f32
    /// accumulators) run here: CUDA from sm_80 (`mma.sync`), Vulkan with
    /// VK_KHR_cooperative_matrix offering that shape at subgroup scope.
    #[serde(default)]
    pub tiles: bool,
    /// Whether kernels with asynchronous copies (`trine_ir::CopyOp`) run here: CUDA from sm_80
    /// (`cp.async`).
    #[serde(default)]
    pub async_copy: bool,
    /// Whether kernels with warpgroup products (`trine_ir::GroupOp`) run here: CUDA on sm_90
    /// (`wgmma`, Hopper).
    #[serde(default)]
    pub group_mma: bool,
    /// The device's multiprocessors (CUDA's SMs, AMD's compute units, Vulkan's where the
    /// driver reports them: VK_NV_shader_sm_builtins, VK_AMD_shader_core_properties): a
    /// product whose grid would leave most of them idle splits its K. `None` where unknown.
    #[serde(default)]
    pub compute_units: Option<u32>,
    pub max_shared_bytes: u64,
    pub max_invocations: u32,
    pub max_workgroups: [u32; 3],
    /// Largest buffer binding a kernel can address, in bytes.
    pub max_binding_bytes: u64,
    /// Alignment of [`crate::Binding::offset`].
    pub min_binding_alignment: u64,
    pub timestamps: bool,
    pub driver: String,
    pub runtime_version: String,
    /// Anything else a user should know (a fallback taken, a feature missing).
    pub notes: Vec<String>,
    /// Kernel choices measured faster on this device than the default ones.
    #[serde(default)]
    pub tuning: Tuning,
}

/// Kernel choices a backend makes for its device where they were measured faster than what
/// the capabilities alone would pick: what the model layer's planner asks instead of naming a
/// driver or a vendor. All off by default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tuning {
    /// A prompt's flash attention cuts the keys into chunks combined after it, so that the
    /// last query block's walk over the keys does not set the dispatch's length.
    pub flash_key_chunks: bool,
    /// Each kernel is launched to overlap the one before it (CUDA's programmatic dependent
    /// launch), so a dispatch of a decode step costs little beyond its own work: the fusion
    /// pass folds into a kernel only what was measured to pay there.
    pub launches_overlap: bool,
}

impl DeviceInfo {
    /// The limits kernels are validated against on this device.
    pub fn limits(&self) -> trine_ir::Limits {
        trine_ir::Limits {
            max_shared_bytes: self.max_shared_bytes,
            max_invocations: self.max_invocations,
        }
    }

    /// The subgroup width every kernel runs with here, where the device has only one.
    pub fn subgroup_size(&self) -> Option<u32> {
        match self.subgroup_sizes[..] {
            [w] => Some(w),
            [min, max] if min == max => Some(min),
            _ => None,
        }
    }

    /// Whether a kernel written for subgroups of exactly `w` runs here: the device's one width,
    /// or a power of two in its range where the backend pins a kernel's declared width.
    pub fn runs_subgroup_width(&self, w: u32) -> bool {
        if self.subgroup_size() == Some(w) {
            return true;
        }
        match self.subgroup_sizes[..] {
            [min, max] => {
                self.subgroup_width_pinned && w.is_power_of_two() && (min..=max).contains(&w)
            }
            _ => false,
        }
    }

    /// The features a kernel's capabilities name that this device lacks, in words, in this
    /// order: subgroup operations, matrix tiles, asynchronous copies, warpgroup products. The
    /// one place that maps a capability flag to the device's, for [`DeviceInfo::lacks`] and the conformance
    /// run's account of a refusal.
    pub fn missing_features(
        &self,
        caps: trine_ir::Capabilities,
    ) -> impl Iterator<Item = &'static str> {
        [
            (caps.subgroup && !self.subgroup_ops, "subgroup operations"),
            (caps.tiles && !self.tiles, "matrix tiles"),
            (caps.async_copy && !self.async_copy, "asynchronous copies"),
            (caps.group_mma && !self.group_mma, "warpgroup products"),
        ]
        .into_iter()
        .filter_map(|(missing, what)| missing.then_some(what))
    }

    /// The first capability a kernel declares that this device lacks, in words: what sends a
    /// kernel to its fallback (a [`DeviceInfo::missing_features`] feature, then the one
    /// subgroup width the kernel is written for).
    pub fn lacks(&self, caps: trine_ir::Capabilities) -> Option<&'static str> {
        self.missing_features(caps).next().or_else(|| {
            caps.subgroup_width
                .is_some_and(|w| !self.runs_subgroup_width(w))
                .then_some("the kernel's subgroup width")
        })
    }
}

/// The driver as Vulkan names it (`driverName`, then `driverInfo`), either part possibly empty:
/// the Vulkan and wgpu backends both report it so, which lets known-bad entries name a driver
/// once for both.
pub(crate) fn driver_string(name: &str, info: &str) -> String {
    match (name.is_empty(), info.is_empty()) {
        (_, true) => name.to_string(),
        (true, false) => info.to_string(),
        (false, false) => format!("{name} {info}"),
    }
}

/// The vendor's name from its PCI id (or Khronos vendor id for drivers without one).
pub(crate) fn vendor_name(id: u32) -> String {
    match id {
        0x1002 => "AMD".into(),
        0x10de => "NVIDIA".into(),
        0x8086 => "Intel".into(),
        0x13b5 => "ARM".into(),
        0x5143 => "Qualcomm".into(),
        0x1010 => "Imagination".into(),
        0x106b => "Apple".into(),
        0x14e4 => "Broadcom".into(),
        0x10005 => "Mesa".into(),
        0x10006 => "PoCL".into(),
        id => format!("0x{id:04x}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CPU backend's own description, with the fields under test replaced.
    fn info(sizes: &[u32], tiles: bool) -> DeviceInfo {
        let mut i = crate::Backend::info(&crate::cpu::CpuBackend::new()).clone();
        i.subgroup_sizes = sizes.to_vec();
        i.subgroup_ops = !sizes.is_empty();
        i.tiles = tiles;
        i
    }

    #[test]
    fn one_subgroup_width_only_where_the_device_has_one() {
        assert_eq!(info(&[32], false).subgroup_size(), Some(32));
        assert_eq!(info(&[32, 32], false).subgroup_size(), Some(32));
        assert_eq!(info(&[32, 64], false).subgroup_size(), None);
        assert_eq!(info(&[], false).subgroup_size(), None);
    }

    #[test]
    fn what_a_device_lacks_sends_a_kernel_to_its_fallback() {
        let caps = |subgroup, tiles, subgroup_width| trine_ir::Capabilities {
            subgroup,
            tiles,
            subgroup_width,
            ..Default::default()
        };
        let tiled = caps(true, true, Some(32));
        assert_eq!(info(&[32], true).lacks(tiled), None);
        assert_eq!(info(&[32], false).lacks(tiled), Some("matrix tiles"));
        assert_eq!(
            info(&[32, 64], true).lacks(tiled),
            Some("the kernel's subgroup width")
        );
        assert_eq!(info(&[], true).lacks(tiled), Some("subgroup operations"));
        assert_eq!(info(&[], false).lacks(caps(false, false, None)), None);
        let pinned = DeviceInfo {
            subgroup_width_pinned: true,
            ..info(&[32, 64], true)
        };
        assert_eq!(pinned.lacks(tiled), None);
        assert_eq!(pinned.lacks(caps(true, false, Some(64))), None);
        assert_eq!(
            pinned.lacks(caps(true, false, Some(16))),
            Some("the kernel's subgroup width")
        );
        assert_eq!(
            pinned.lacks(caps(true, false, Some(48))),
            Some("the kernel's subgroup width")
        );
    }
}
