//! Choosing the compute backend at run time.
//!
//! `auto` takes a hardware GPU through wgpu when one exists (discrete first, then integrated,
//! then virtual) and otherwise the `flex` CPU backend; `wgpu` takes any wgpu adapter, including a
//! software one such as lavapipe (for tests); `flex` is the CPU backend. Model initialization and
//! data order come from host-side streams, so a scenario starts from the same numbers on each.

use std::fmt;
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use burn::tensor::{Device, DeviceKind};

use crate::error::{Error, Result};

/// What the user asked for (`--backend`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BackendChoice {
    /// A hardware GPU if there is one, else `flex`.
    #[default]
    Auto,
    /// Any wgpu adapter, hardware or software.
    Wgpu,
    /// The CPU backend.
    Flex,
}

impl std::str::FromStr for BackendChoice {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "auto" => Ok(BackendChoice::Auto),
            "wgpu" => Ok(BackendChoice::Wgpu),
            "flex" => Ok(BackendChoice::Flex),
            other => Err(format!(
                "unknown backend `{other}` (expected auto, wgpu or flex)"
            )),
        }
    }
}

/// The name `--backend` takes, which [`FromStr`](std::str::FromStr) reads back: `auto`, `wgpu`
/// or `flex` (a checkpoint and a sweep point record it so).
impl fmt::Display for BackendChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BackendChoice::Auto => "auto",
            BackendChoice::Wgpu => "wgpu",
            BackendChoice::Flex => "flex",
        })
    }
}

/// The backend a run uses.
#[derive(Clone, Debug)]
pub struct Backend {
    /// The device replicas live on.
    pub device: Device,
    /// `flex` or `wgpu`.
    pub name: &'static str,
    /// The adapter or CPU, in words.
    pub device_name: String,
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name, self.device_name)
    }
}

/// The widest vector instructions of this CPU that `flex`'s matrix products (gemm, built with
/// its AVX-512 kernels) and the replica store's row loops use: `avx512f`, `avx2` (with FMA for
/// gemm), `sse2` on other x86-64 CPUs, `neon` on 64-bit ARM, or the architecture's name. gemm
/// chooses its kernels at run time, so two hosts with different values can differ in a model's
/// last bits (the book's determinism rules); `timings.json` records it.
pub fn cpu_kernels() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            "avx512f"
        } else if std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
        {
            "avx2"
        } else {
            "sse2"
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        "neon"
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        std::env::consts::ARCH
    }
}

/// A wgpu adapter found on this machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Adapter {
    /// Adapter name, e.g. `NVIDIA H100` or `llvmpipe (LLVM 15.0.6, 256 bits)`.
    pub name: String,
    /// Graphics API, e.g. `Vulkan`.
    pub api: String,
    /// wgpu's device type.
    pub kind: wgpu::DeviceType,
}

fn block_on<F: Future>(f: F) -> Option<F::Output> {
    // Native wgpu resolves adapter enumeration synchronously; poll once.
    let mut f = pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => Some(v),
        Poll::Pending => None,
    }
}

/// Lists the wgpu adapters of the primary APIs (Vulkan, Metal, DX12).
pub fn adapters() -> Vec<Adapter> {
    let instance =
        wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    block_on(instance.enumerate_adapters(wgpu::Backends::PRIMARY))
        .unwrap_or_default()
        .into_iter()
        .map(|a| {
            let info = a.get_info();
            Adapter {
                name: info.name,
                api: format!("{:?}", info.backend),
                kind: info.device_type,
            }
        })
        .collect()
}

/// Whether `device` is `flex`, the CPU backend (with or without autodiff). Where the work of a
/// pass is placed differs between it and a GPU: threads split `flex`'s passes, and the
/// convolutions take another form on a GPU.
pub fn is_flex(device: &Device) -> bool {
    device.clone().without_autodiff() == Device::flex()
}

fn flex() -> Backend {
    Backend {
        device: Device::flex(),
        name: "flex",
        device_name: "CPU".into(),
    }
}

fn pick(adapters: &[Adapter], kinds: &[wgpu::DeviceType]) -> Option<Backend> {
    for &kind in kinds {
        if let Some(a) = adapters.iter().find(|a| a.kind == kind) {
            let device_kind = match kind {
                wgpu::DeviceType::DiscreteGpu => DeviceKind::DiscreteGpu(0),
                wgpu::DeviceType::IntegratedGpu => DeviceKind::IntegratedGpu(0),
                wgpu::DeviceType::VirtualGpu => DeviceKind::VirtualGpu(0),
                wgpu::DeviceType::Cpu => DeviceKind::Cpu,
                wgpu::DeviceType::Other => DeviceKind::DefaultDevice,
            };
            return Some(Backend {
                device: Device::wgpu(device_kind),
                name: "wgpu",
                device_name: format!("{} via {}", a.name, a.api),
            });
        }
    }
    None
}

const HARDWARE: [wgpu::DeviceType; 3] = [
    wgpu::DeviceType::DiscreteGpu,
    wgpu::DeviceType::IntegratedGpu,
    wgpu::DeviceType::VirtualGpu,
];

/// Resolves a choice to a device.
pub fn select(choice: BackendChoice) -> Result<Backend> {
    match choice {
        BackendChoice::Flex => Ok(flex()),
        BackendChoice::Auto => Ok(pick(&adapters(), &HARDWARE).unwrap_or_else(flex)),
        BackendChoice::Wgpu => {
            let found = adapters();
            let mut kinds = HARDWARE.to_vec();
            kinds.extend([wgpu::DeviceType::Cpu, wgpu::DeviceType::Other]);
            pick(&found, &kinds).ok_or_else(|| {
                Error::Backend(
                    "no wgpu adapter found; install a Vulkan driver (on Debian: libvulkan1 and \
                     mesa-vulkan-drivers for the lavapipe software driver) or use --backend flex"
                        .into(),
                )
            })
        }
    }
}
