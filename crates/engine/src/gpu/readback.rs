//! One readback path for native and wasm: copy to a staging buffer, `map_async` with a oneshot
//! channel, poll natively (the browser drives the callback itself), then await the channel.

use super::{GpuBackend, GpuIndex, GpuTensor};
use crate::{EngineError, Result};
use std::future::Future;

impl GpuBackend {
    pub(crate) fn read_tensor(&self, t: &GpuTensor) -> impl Future<Output = Result<Vec<f32>>> {
        let words = self.read_words(&t.buffer, t.offset, t.len);
        async move { Ok(words.await?.into_iter().map(f32::from_bits).collect()) }
    }

    pub(crate) fn read_indices(&self, t: &GpuIndex) -> impl Future<Output = Result<Vec<u32>>> {
        self.read_words(&t.buffer, 0, t.len)
    }

    /// `len` 32-bit words of `buffer` from word `offset`.
    fn read_words(&self, buffer: &wgpu::Buffer, offset: usize, len: usize) -> impl Future<Output = Result<Vec<u32>>> {
        self.submit_pending();
        let bytes = (len * 4) as u64;
        let staging = self
            .staging
            .borrow_mut()
            .entry(bytes)
            .or_insert_with(|| {
                self.device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("readback"),
                    size: bytes.max(4),
                    usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                })
            })
            .clone();
        let mut encoder = self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("readback"),
        });
        if bytes > 0 {
            encoder.copy_buffer_to_buffer(buffer, (offset * 4) as u64, &staging, 0, bytes);
        }
        self.queue.submit([encoder.finish()]);
        let (tx, rx) = futures_channel::oneshot::channel();
        staging.map_async(wgpu::MapMode::Read, .., move |r| {
            let _ = tx.send(r);
        });
        #[cfg(not(target_arch = "wasm32"))]
        let polled = self
            .device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| EngineError::Readback(e.to_string()));
        #[cfg(target_arch = "wasm32")]
        let polled: Result<()> = Ok(());
        let checked = self.take_error();
        async move {
            polled?;
            checked?;
            rx.await
                .map_err(|_| EngineError::Readback("the map callback never ran".into()))??;
            let values = {
                let view = staging
                    .get_mapped_range(..)
                    .map_err(|e| EngineError::Readback(e.to_string()))?;
                bytemuck::cast_slice::<u8, u32>(&view)[..bytes as usize / 4].to_vec()
            };
            staging.unmap();
            Ok(values)
        }
    }
}
