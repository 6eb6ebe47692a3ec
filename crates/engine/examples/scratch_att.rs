use resmem_engine::ops::attention::*;
use std::time::Instant;

fn main() {
    let d = AttentionDims {
        b: 32,
        t: 128,
        h: 8,
        dh: 32,
        scale: 1.0 / (32f32).sqrt(),
        alibi: false,
    };
    let c = d.h * d.dh;
    let qkv: Vec<f32> = (0..d.b * d.t * 3 * c)
        .map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5)
        .collect();
    let dout: Vec<f32> = (0..d.b * d.t * c)
        .map(|i| ((i * 31) % 97) as f32 / 97.0 - 0.5)
        .collect();
    let mut out = vec![0f32; d.b * d.t * c];
    let mut lse = vec![0f32; d.rows()];
    let mut delta = vec![0f32; d.rows()];
    let mut dqkv = vec![0f32; qkv.len()];
    let starts = vec![0u32; d.b * d.t];
    let mut best = [f64::MAX; 2];
    for _ in 0..20 {
        let t = Instant::now();
        cpu_forward(&mut out, &mut lse, &qkv, &starts, d);
        best[0] = best[0].min(t.elapsed().as_secs_f64());
        let t = Instant::now();
        cpu_backward(&mut dqkv, &mut delta, &dout, &out, &qkv, &lse, &starts, d);
        best[1] = best[1].min(t.elapsed().as_secs_f64());
    }
    let s: f64 = out.iter().map(|&x| x as f64).sum::<f64>() + dqkv.iter().map(|&x| x as f64).sum::<f64>();
    println!(
        "fwd {:.3} ms  bwd {:.3} ms  (check {s:.6e})",
        best[0] * 1e3,
        best[1] * 1e3
    );
}
