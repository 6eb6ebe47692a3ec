//! One readback path for native and wasm: copy to a staging buffer, `map_async` with a oneshot
//! channel, poll natively (the browser drives the callback itself), then await the channel.

use super::{GpuBackend, GpuIndex, GpuTensor};
use crate::{EngineError, Result};
use std::future::Future;

impl GpuBackend {
    pub(crate) fn read_tensor(&self, t: &GpuTensor) -> impl Future<Output = Result<Vec<f32>>> {
        let words = self.read_words(&[(&t.buffer, t.offset, t.len)]);
        async move {
            let mut parts = words.await?;
            Ok(parts.swap_remove(0).into_iter().map(f32::from_bits).collect())
        }
    }

    /// Every index in one copy and one map: a view that reads many small buffers each step (the
    /// bucket counts of every hash table) waits for the GPU once.
    pub(crate) fn read_index_list(&self, ts: &[&GpuIndex]) -> impl Future<Output = Result<Vec<Vec<u32>>>> {
        let parts: Vec<_> = ts.iter().map(|t| (&t.buffer, t.offset, t.len)).collect();
        self.read_words(&parts)
    }

    /// Each part's `len` 32-bit words of its buffer from word `offset`, copied into one staging
    /// buffer and mapped once.
    fn read_words(&self, parts: &[(&wgpu::Buffer, usize, usize)]) -> impl Future<Output = Result<Vec<Vec<u32>>>> {
        self.submit_pending();
        let lens: Vec<usize> = parts.iter().map(|p| p.2).collect();
        let bytes = (lens.iter().sum::<usize>() * 4) as u64;
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
        let mut at = 0u64;
        for &(buffer, offset, len) in parts {
            let part = (len * 4) as u64;
            if part > 0 {
                encoder.copy_buffer_to_buffer(buffer, (offset * 4) as u64, &staging, at, part);
            }
            at += part;
        }
        self.queue.submit([encoder.finish()]);
        self.map_and_read(staging, move |bytes| {
            let words = bytemuck::cast_slice::<u8, u32>(bytes);
            let mut at = 0;
            lens.iter()
                .map(|&len| {
                    at += len;
                    words[at - len..at].to_vec()
                })
                .collect()
        })
    }

    /// Maps `staging`, whose copy is submitted, waits for it, and reads its bytes with `read`:
    /// the one way anything comes back from the device (values, and timestamps in `timing.rs`).
    pub(crate) fn map_and_read<T>(
        &self,
        staging: wgpu::Buffer,
        read: impl FnOnce(&[u8]) -> T,
    ) -> impl Future<Output = Result<T>> {
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
            let out = {
                let view = staging
                    .get_mapped_range(..)
                    .map_err(|e| EngineError::Readback(e.to_string()))?;
                read(&view)
            };
            staging.unmap();
            Ok(out)
        }
    }
}
