use resmem_engine::ops::norm::NormKind;
use resmem_engine::ops::residual_matrix::*;
use resmem_engine::NormDims;
use std::time::Instant;

fn main() {
    let tokens = 4096;
    let (dk, dv) = (32, 32);
    let reps = 30;
    for keys in [24usize, 8] {
        let d = ResidualDims { tokens, dk, dv, keys };
        let norm = NormDims {
            rows: tokens,
            c: dk * dv,
            kind: NormKind::LayerNorm,
            eps: 1e-5,
        };
        let vm = d.matrices();
        let x: Vec<f32> = (0..vm).map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5).collect();
        let mut dx = vec![0f32; vm];
        let dy: Vec<f32> = (0..d.vectors()).map(|i| ((i * 31) % 97) as f32 / 97.0 - 0.5).collect();
        let keysv: Vec<f32> = (0..d.key_values())
            .map(|i| ((i * 13) % 17) as f32 / 17.0 - 0.5)
            .collect();
        let gain = vec![1.0f32; dk * dv];
        let mut stats = vec![0f32; 2 * tokens];
        let mut y = vec![0f32; d.vectors()];
        let mut dgain = vec![0f32; dk * dv];
        let mut dkeys = vec![0f32; d.key_values()];
        let mut out = vec![0f32; vm];
        let mut ddata = vec![0f32; d.vectors()];
        cpu_retrieve_normed(&mut y, &mut stats, &x, &gain, &keysv, d, norm);
        let mut best = [f64::MAX; 4];
        for _ in 0..reps {
            let t = Instant::now();
            cpu_retrieve_normed(&mut y, &mut stats, &x, &gain, &keysv, d, norm);
            best[0] = best[0].min(t.elapsed().as_secs_f64());
            let t = Instant::now();
            cpu_retrieve_normed_backward(&mut dx, &mut dgain, &mut dkeys, &dy, &x, &stats, &gain, &keysv, d, norm);
            best[1] = best[1].min(t.elapsed().as_secs_f64());
            let t = Instant::now();
            cpu_store(&mut out, Some(&x), &keysv, &dy, d);
            best[2] = best[2].min(t.elapsed().as_secs_f64());
            let t = Instant::now();
            cpu_store_backward(&mut ddata, &mut dkeys, &x, &keysv, &dy, d);
            best[3] = best[3].min(t.elapsed().as_secs_f64());
        }
        let m = (vm * 4) as f64 / 1e6;
        let v = (d.vectors() * 4) as f64 / 1e6;
        let bytes = [m + v, 3.0 * m + v, 2.0 * m + v, m + 2.0 * v];
        let names = ["retrieve", "retrieve_bw", "store", "store_bw"];
        for i in 0..4 {
            println!(
                "keys {keys:2} {:12} {:7.3} ms  {:6.1} GB/s",
                names[i],
                best[i] * 1e3,
                bytes[i] / best[i] / 1e3
            );
        }
        std::hint::black_box((&dx, &dgain, &dkeys, &out, &ddata, &y));
    }
}
