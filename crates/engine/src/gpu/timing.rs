//! Timestamp queries around each launch of a recorded plan, where the device has them:
//! `resmem bench` splits one replay of a training step into its launches' times this way, and
//! replays each kernel family alone where it cannot (`profile::Profiled::time_family`).
//!
//! Each launch runs in a compute pass of its own whose start and end the pass's
//! `timestamp_writes` record: that needs only `Features::TIMESTAMP_QUERY`, which WebGPU has too,
//! not writes inside a pass. Launches in separate passes see each other's writes as in one pass.

use super::{Dispatch, GpuBackend, GpuPlan};
use crate::{EngineError, Result};
use std::future::Future;

/// Launches per query set: two timestamps each, up to wgpu's largest query set.
const PER_SET: usize = (wgpu::QUERY_SET_MAX_QUERIES / 2) as usize;

impl GpuBackend {
    /// Whether the device was created with timestamp queries: the adapter has them and
    /// [`super::GpuOptions::no_timestamps`] is off.
    pub fn timestamps(&self) -> bool {
        self.timestamps
    }

    /// Replays `plan` once, after whatever is pending, with each launch in its own timed pass:
    /// the seconds each launch took on the device, in the plan's order. An error on a device
    /// without timestamp queries.
    pub fn time_launches(&self, plan: &GpuPlan) -> impl Future<Output = Result<Vec<f64>>> {
        self.submit_pending();
        self.time_dispatches(&plan.dispatches)
    }

    /// Runs `dispatches` once, each in its own timed pass, after what was submitted before (not
    /// what is pending): the seconds each took.
    pub(crate) fn time_dispatches(&self, dispatches: &[Dispatch]) -> impl Future<Output = Result<Vec<f64>>> {
        let launches = dispatches.len();
        let period_ns = self.queue.get_timestamp_period() as f64;
        let read = self.timestamps.then(|| {
            self.map_and_read(self.encode_timed(dispatches), move |bytes| {
                let ticks = bytemuck::cast_slice::<u8, u64>(bytes);
                // A device may count past the end between passes: never a negative time.
                (ticks.chunks_exact(2).take(launches))
                    .map(|t| t[1].saturating_sub(t[0]) as f64 * period_ns * 1e-9)
                    .collect()
            })
        });
        async move {
            match read {
                Some(read) => read.await,
                None => Err(EngineError::Gpu("this device has no timestamp queries".into())),
            }
        }
    }

    /// Encodes and submits `dispatches`, each in a pass with timestamps at its start and end,
    /// and the copy of all timestamps to a staging buffer, which it returns.
    fn encode_timed(&self, dispatches: &[Dispatch]) -> wgpu::Buffer {
        // Each set's timestamps resolve to a whole number of 256-byte units.
        let set_bytes = (PER_SET * 2) as u64 * wgpu::QUERY_SIZE as u64;
        let bytes = (dispatches.len().div_ceil(PER_SET).max(1)) as u64 * set_bytes;
        let buffer = |label, usage| {
            self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size: bytes,
                usage,
                mapped_at_creation: false,
            })
        };
        let resolved = buffer(
            "timestamps",
            wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
        );
        let staging = buffer(
            "timestamps readback",
            wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        );
        let mut encoder = self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("timed step"),
        });
        for (set_index, chunk) in dispatches.chunks(PER_SET).enumerate() {
            let queries = (2 * chunk.len()) as u32;
            let set = self.device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("launch timestamps"),
                ty: wgpu::QueryType::Timestamp,
                count: queries,
            });
            for (i, d) in chunk.iter().enumerate() {
                let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: Some("timed launch"),
                    timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
                        query_set: &set,
                        beginning_of_pass_write_index: Some(2 * i as u32),
                        end_of_pass_write_index: Some(2 * i as u32 + 1),
                    }),
                });
                pass.set_pipeline(&d.pipeline);
                pass.set_bind_group(0, &d.bind_group, &[]);
                pass.dispatch_workgroups(d.groups[0], d.groups[1], d.groups[2]);
            }
            encoder.resolve_query_set(&set, 0..queries, &resolved, set_index as u64 * set_bytes);
        }
        encoder.copy_buffer_to_buffer(&resolved, 0, &staging, 0, bytes);
        self.queue.submit([encoder.finish()]);
        staging
    }
}
