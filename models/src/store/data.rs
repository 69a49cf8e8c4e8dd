//! The training and test splits where the passes read them: on the device for burn's pass,
//! on the host for a CPU program.

use super::*;

pub(super) struct DeviceData {
    /// `[len, dim]` samples; a text's token stream `[tokens, 1]`, which its windows view.
    pub(super) x: Tensor<2>,
    pub(super) y: Targets,
    pub(super) len: usize,
    /// A text's windows: `(stride, window)`; `None` for datasets of separate samples.
    pub(super) windows: Option<(usize, usize)>,
}

impl DeviceData {
    pub(super) fn upload(data: &Dataset, device: &Device) -> Self {
        if let TargetKind::Tokens(_) = data.target {
            let n = data.features.len();
            let tokens: Vec<i64> = data.features.iter().map(|&t| t as i64).collect();
            return DeviceData {
                x: Tensor::from_data(TensorData::new(data.features.clone(), [n, 1]), device),
                y: Targets::Classes(Tensor::from_data(TensorData::new(tokens, [n]), device)),
                len: data.len(),
                windows: Some((data.stride, data.dim)),
            };
        }
        let x = Tensor::from_data(
            TensorData::new(data.features.clone(), [data.len(), data.dim]),
            device,
        );
        let y = match data.target {
            TargetKind::Classes(_) => {
                let labels: Vec<i64> = data.labels.iter().map(|&l| i64::from(l)).collect();
                Targets::Classes(Tensor::from_data(
                    TensorData::new(labels, [data.len()]),
                    device,
                ))
            }
            TargetKind::Real => Targets::Real(Tensor::from_data(
                TensorData::new(data.values.clone(), [data.len()]),
                device,
            )),
            TargetKind::Tokens(_) => unreachable!("handled above"),
        };
        DeviceData {
            x,
            y,
            len: data.len(),
            windows: None,
        }
    }

    /// A text's windows `samples` as positions in its token stream: the window's tokens
    /// (`[n·window]`), and the positions the window predicts, each one ahead of an input
    /// (`[n·(window − 1)]`).
    pub(super) fn window_positions(
        &self,
        samples: impl Iterator<Item = usize>,
    ) -> (Tensor<1, Int>, Tensor<1, Int>) {
        let (stride, window) = self.windows.expect("a text");
        let mut inputs = Vec::new();
        let mut targets = Vec::new();
        for i in samples {
            let start = (i * stride) as i64;
            inputs.extend(start..start + window as i64);
            targets.extend(start + 1..start + window as i64);
        }
        let device = self.x.device();
        let (ni, nt) = (inputs.len(), targets.len());
        (
            Tensor::from_data(TensorData::new(inputs, [ni]), &device),
            Tensor::from_data(TensorData::new(targets, [nt]), &device),
        )
    }

    /// The windows `samples` (`r·b` of them) of a text: inputs `[r, b, window]` and the
    /// targets of their `window − 1` positions, `[r, b·(window − 1), 1]`.
    pub(super) fn windows(
        &self,
        samples: impl Iterator<Item = usize>,
        r: usize,
        b: usize,
    ) -> (Tensor<3>, BatchTargets) {
        let (_, window) = self.windows.expect("a text");
        let (inputs, targets) = self.window_positions(samples);
        let x = self.x.clone().select(0, inputs).reshape([r, b, window]);
        let Targets::Classes(tokens) = &self.y else {
            unreachable!("a text's targets are its tokens")
        };
        let y = tokens
            .clone()
            .select(0, targets)
            .reshape([r, b * (window - 1), 1]);
        (x, BatchTargets::Classes(y))
    }

    /// The targets of the samples `idx` (`R·B` of them), shaped for `R` minibatches.
    pub(super) fn select(&self, idx: Tensor<1, Int>, r: usize, b: usize) -> BatchTargets {
        match &self.y {
            Targets::Classes(y) => {
                BatchTargets::Classes(y.clone().select(0, idx).reshape([r, b, 1]))
            }
            Targets::Real(y) => BatchTargets::Real(y.clone().select(0, idx).reshape([r, b])),
        }
    }

    /// The samples `range`, as one minibatch.
    pub(super) fn rows(&self, range: Range<usize>) -> (Tensor<3>, BatchTargets) {
        let b = range.len();
        if self.windows.is_some() {
            return self.windows(range, 1, b);
        }
        let dim = self.x.dims()[1];
        let x = self
            .x
            .clone()
            .slice_dim(0, range.clone())
            .reshape([1, b, dim]);
        let y = match &self.y {
            Targets::Classes(y) => {
                BatchTargets::Classes(y.clone().slice_dim(0, range).reshape([1, b, 1]))
            }
            Targets::Real(y) => BatchTargets::Real(y.clone().slice_dim(0, range).reshape([1, b])),
        };
        (x, y)
    }
}

/// A thread's buffers for gathering a minibatch on the CPU path.
#[derive(Default)]
pub(super) struct CpuScratch {
    pub(super) params: Vec<f32>,
    pub(super) x: Vec<f32>,
    pub(super) labels: Vec<u32>,
    pub(super) values: Vec<f32>,
}

/// Where the store keeps a split: on the device for burn's passes, or on the host for a
/// model's CPU program ([`CpuNet`], on `flex`), which reads it in place.
pub(super) enum Held {
    Device(Box<DeviceData>),
    Host(Dataset),
}

impl Held {
    pub(super) fn new(data: &Dataset, device: &Device, host: bool) -> Self {
        if host {
            Held::Host(data.clone())
        } else {
            Held::Device(Box::new(DeviceData::upload(data, device)))
        }
    }

    pub(super) fn len(&self) -> usize {
        match self {
            Held::Device(d) => d.len,
            Held::Host(d) => d.len(),
        }
    }

    /// The split on the device, for burn's passes.
    pub(super) fn device(&self) -> &DeviceData {
        match self {
            Held::Device(d) => d,
            Held::Host(_) => unreachable!("burn's passes run off the CPU path only"),
        }
    }

    /// The split on the host, for the CPU programs.
    pub(super) fn host(&self) -> &Dataset {
        match self {
            Held::Host(d) => d,
            Held::Device(_) => unreachable!("the CPU programs run on flex only"),
        }
    }
}
