//! A model's parameters as safetensors bytes: one tensor per parameter, named and shaped as
//! the layout declares it. The flat buffer's padding is not stored.

use crate::params::ParamLayout;
use crate::{ModelError, Result};
use safetensors::tensor::{Dtype, SafeTensors, TensorView};

/// The parameters `values` (the flat buffer, padding included) as safetensors bytes.
pub fn to_bytes(layout: &ParamLayout, values: &[f32]) -> Result<Vec<u8>> {
    let bytes: Vec<(String, Vec<usize>, &[u8])> = layout
        .specs
        .iter()
        .map(|s| {
            let data: &[f32] = &values[s.offset..s.offset + s.len()];
            // safetensors is little-endian, as every target resmem builds for.
            (s.name.clone(), s.shape.clone(), bytemuck::cast_slice::<f32, u8>(data))
        })
        .collect();
    let views = bytes
        .iter()
        .map(|(name, shape, data)| Ok((name.clone(), TensorView::new(Dtype::F32, shape.clone(), data)?)))
        .collect::<Result<Vec<_>, safetensors::SafeTensorError>>()
        .map_err(|e| ModelError::Checkpoint(e.to_string()))?;
    safetensors::serialize(views, None).map_err(|e| ModelError::Checkpoint(e.to_string()))
}

/// The flat parameter buffer of `layout` from safetensors bytes; every parameter must be there
/// with its shape.
pub fn from_bytes(layout: &ParamLayout, bytes: &[u8]) -> Result<Vec<f32>> {
    let bad = |what: String| ModelError::Checkpoint(what);
    let file = SafeTensors::deserialize(bytes).map_err(|e| bad(format!("not a safetensors file: {e}")))?;
    let mut values = vec![0.0; layout.total];
    for s in &layout.specs {
        let t = file
            .tensor(&s.name)
            .map_err(|_| bad(format!("it has no tensor `{}`; was it saved by another model?", s.name)))?;
        if t.dtype() != Dtype::F32 || t.shape() != s.shape.as_slice() {
            return Err(bad(format!(
                "`{}` is {:?} {:?}, but this model needs f32 {:?}",
                s.name,
                t.dtype(),
                t.shape(),
                s.shape
            )));
        }
        for (v, b) in values[s.offset..s.offset + s.len()]
            .iter_mut()
            .zip(t.data().chunks_exact(4))
        {
            *v = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        }
    }
    Ok(values)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::{Init, LayoutBuilder};

    fn layout(width: usize) -> ParamLayout {
        let mut lb = LayoutBuilder::default();
        lb.add("a", &[3, width], true, Init::Normal { std: 1.0 });
        lb.add("b", &[5], false, Init::Constant(1.0));
        lb.build()
    }

    #[test]
    fn round_trip_keeps_every_value_and_padding_stays_zero() {
        let l = layout(7);
        let values = l.init_values(3);
        let back = from_bytes(&l, &to_bytes(&l, &values).unwrap()).unwrap();
        assert_eq!(back, values);
    }

    #[test]
    fn wrong_shapes_and_corrupt_files_are_clear_errors() {
        let bytes = to_bytes(&layout(7), &layout(7).init_values(3)).unwrap();
        let err = from_bytes(&layout(8), &bytes).unwrap_err().to_string();
        assert!(err.contains("`a`") && err.contains("[3, 8]"), "{err}");
        let err = from_bytes(&layout(7), &bytes[..bytes.len() / 2])
            .unwrap_err()
            .to_string();
        assert!(err.contains("not a safetensors file"), "{err}");
    }
}
