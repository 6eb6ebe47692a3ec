//! Sites: the parts of a model an intervention addresses, by one name in the CLI, the JSON and
//! the page (`embedding`, `block1.attn`, `block1.attn.head3`, `slot5`, `block0.ff.stream2`,
//! `block0.ff.resid`, `block0.ml2.table3`), and the points of the forward where each lives.

use crate::probes::Layer;
use crate::{ModelError, Result};
use engine::Backend;
use std::fmt;
use std::ops::Range;

/// A tensor of the forward that an edit may overwrite, after it is computed and before
/// anything reads it: (B·T rows, `width`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Point {
    /// What the embedding writes (for hyper-connections, before it is copied into every
    /// stream).
    Embedding,
    /// Block l's heads' outputs, before the attention's output map: a head a group of columns.
    Heads(usize),
    /// What block l's attention or FF writes: its output or, where the model fuses the write
    /// with the residual add (the RMT's storage), the values it stores along its keys. The
    /// write is linear in them, so zeroing, averaging or copying them does the same to it.
    Write(usize, Layer),
    /// The residual after depth d (0: the embedding's; 2l + 1: after block l's attention;
    /// 2l + 2: after its FF), its key slots (an RMT's rows) or streams as groups.
    Residual(usize),
    /// Block l's Memory Layer: each table's term p_k · T_k[code_k] of its output, a table a
    /// group (tokens, K·d_out). Its forward writes the terms apart only when an edit or a copy
    /// asks for them; their gradient is the layer output's, the same for every table.
    Tables(usize, MemoryLayer),
}

/// A block's Memory Layers, named as the bucket statistics name them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MemoryLayer {
    /// MemoryFormer's ML_QKV, before attention.
    Qkv,
    /// The memory block's ML1 (d → (τ+e)·K).
    Ml1,
    /// The memory block's ML2, whose output the residual adds.
    Ml2,
}

impl MemoryLayer {
    pub fn word(self) -> &'static str {
        match self {
            MemoryLayer::Qkv => "qkv",
            MemoryLayer::Ml1 => "ml1",
            MemoryLayer::Ml2 => "ml2",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        [MemoryLayer::Qkv, MemoryLayer::Ml1, MemoryLayer::Ml2]
            .into_iter()
            .find(|m| m.word() == s)
    }
}

/// One point of a model's forward and its tensor.
pub struct EditPoint<'a, B: Backend> {
    pub point: Point,
    /// Where the forward computes it: a later layer may reuse the buffer (a vector residual's
    /// writes share one), so read a point's values after a forward through `Edits::capture`.
    /// None for a Memory Layer's tables, whose terms exist only where an edit asks.
    pub tensor: Option<&'a B::Tensor>,
    /// Values a token.
    pub width: usize,
    /// Equal groups of columns: heads at `Heads`, key slots or streams at `Residual`, else 1.
    pub groups: usize,
}

impl<'a, B: Backend> EditPoint<'a, B> {
    pub fn new(point: Point, tensor: &'a B::Tensor, width: usize, groups: usize) -> Self {
        Self {
            point,
            tensor: Some(tensor),
            width,
            groups,
        }
    }

    /// Block `l`'s Memory Layer `layer` of K tables `dims.k` writing d_out each.
    pub fn tables(l: usize, (layer, dims): (MemoryLayer, engine::MemoryDims)) -> Self {
        Self {
            point: Point::Tables(l, layer),
            tensor: None,
            width: dims.k * dims.d_out,
            groups: dims.k,
        }
    }
}

/// The points before block 0: what the embedding writes, and the residual it makes (which may
/// be the same tensor).
pub fn embedding_points<'a, B: Backend>(
    (written, width): (&'a B::Tensor, usize),
    (residual, residual_width, groups): (&'a B::Tensor, usize, usize),
) -> [EditPoint<'a, B>; 2] {
    [
        EditPoint::new(Point::Embedding, written, width, 1),
        EditPoint::new(Point::Residual(0), residual, residual_width, groups),
    ]
}

/// Block `l`'s points in forward order: its Memory Layers before attention (`tables[0]`), its
/// heads (tensor, width, heads), its attention's write, the residual after it, its FF's Memory
/// Layers (`tables[1]`), its FF's write and the residual after it; the writes (tensor, width),
/// the residuals `residual` (width, groups) wide.
pub fn block_points<'a, B: Backend>(
    l: usize,
    (heads, heads_width, n_heads): (&'a B::Tensor, usize, usize),
    [(attn, attn_width), (ff, ff_width)]: [(&'a B::Tensor, usize); 2],
    [after_attn, after_ff]: [&'a B::Tensor; 2],
    (width, groups): (usize, usize),
    tables: [Vec<(MemoryLayer, engine::MemoryDims)>; 2],
) -> Vec<EditPoint<'a, B>> {
    let [before_attn, in_ff] = tables.map(|t| t.into_iter().map(move |t| EditPoint::tables(l, t)));
    let mut points: Vec<EditPoint<'a, B>> = before_attn.collect();
    points.extend([
        EditPoint::new(Point::Heads(l), heads, heads_width, n_heads),
        EditPoint::new(Point::Write(l, Layer::Attn), attn, attn_width, 1),
        EditPoint::new(Point::Residual(2 * l + 1), after_attn, width, groups),
    ]);
    points.extend(in_ff);
    points.extend([
        EditPoint::new(Point::Write(l, Layer::Ff), ff, ff_width, 1),
        EditPoint::new(Point::Residual(2 * l + 2), after_ff, width, groups),
    ]);
    points
}

/// What a residual's groups are called.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Group {
    /// A row of an RMT's D_k×D_v residual: what is stored along key direction k.
    Slot,
    /// One of hyper-connections' n streams.
    Stream,
    /// One of AltUp's K sub-blocks.
    SubBlock,
    /// One of Attention Residuals' N + 1 depth blocks: b_0 the embedding, b_n block n's outputs.
    DepthBlock,
}

impl Group {
    fn word(self) -> &'static str {
        match self {
            Group::Slot => "slot",
            Group::Stream => "stream",
            Group::SubBlock => "sub-block",
            Group::DepthBlock => "depth-block",
        }
    }
}

/// A part of a model an intervention addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Site {
    /// `embedding`: what the embedding writes.
    Embedding,
    /// `block1.attn`, `block0.ff`: what a layer writes.
    Write(usize, Layer),
    /// `block1.attn.head3`: one head's part of its attention's write.
    Head(usize, usize),
    /// `slot5`, `stream2`: one group of the residual at every depth; `block0.attn.slot5`,
    /// `embedding.stream1`: at the residual after that depth only.
    Group {
        group: Group,
        index: usize,
        depth: Option<usize>,
    },
    /// `block0.ff.resid`, `embedding.resid`: the whole residual after that depth.
    Residual(usize),
    /// `block0.ml2.table3`: one table of a block's Memory Layer, its term of the layer's output.
    Table {
        block: usize,
        layer: MemoryLayer,
        index: usize,
    },
}

/// The name of the residual after depth `d`, as `resmem analyze residual` names it.
pub fn depth_name(d: usize) -> String {
    match d {
        0 => "embedding".into(),
        d => format!("block{}.{}", (d - 1) / 2, if d % 2 == 1 { "attn" } else { "ff" }),
    }
}

fn layer_name(layer: Layer) -> &'static str {
    match layer {
        Layer::Attn => "attn",
        Layer::Ff => "ff",
    }
}

impl fmt::Display for Site {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Site::Embedding => write!(f, "embedding"),
            Site::Write(l, layer) => write!(f, "block{l}.{}", layer_name(layer)),
            Site::Head(l, h) => write!(f, "block{l}.attn.head{h}"),
            Site::Group {
                group,
                index,
                depth: None,
            } => write!(f, "{}{index}", group.word()),
            Site::Group {
                group,
                index,
                depth: Some(d),
            } => write!(f, "{}.{}{index}", depth_name(d), group.word()),
            Site::Residual(d) => write!(f, "{}.resid", depth_name(d)),
            Site::Table { block, layer, index } => write!(f, "block{block}.{}.table{index}", layer.word()),
        }
    }
}

/// `word` followed by a number, as in `head3`.
fn numbered(s: &str, word: &str) -> Option<usize> {
    s.strip_prefix(word)
        .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))?
        .parse()
        .ok()
}

/// `embedding` → 0, `block1.attn` → 3, …: the depth a residual name stands for.
fn depth_of(parts: &[&str]) -> Option<usize> {
    match parts {
        ["embedding"] => Some(0),
        [block, "attn"] => Some(2 * numbered(block, "block")? + 1),
        [block, "ff"] => Some(2 * numbered(block, "block")? + 2),
        _ => None,
    }
}

impl std::str::FromStr for Site {
    type Err = ModelError;

    fn from_str(s: &str) -> Result<Self> {
        let parts: Vec<&str> = s.split('.').collect();
        let group = |p: &str| {
            let slot = numbered(p, "slot").map(|i| (Group::Slot, i));
            (slot.or_else(|| numbered(p, "stream").map(|i| (Group::Stream, i))))
                .or_else(|| numbered(p, "sub-block").map(|i| (Group::SubBlock, i)))
                .or_else(|| numbered(p, "depth-block").map(|i| (Group::DepthBlock, i)))
        };
        let site = match parts.as_slice() {
            ["embedding"] => Some(Site::Embedding),
            [one] => group(one).map(|(group, index)| Site::Group {
                group,
                index,
                depth: None,
            }),
            [block, "attn"] => numbered(block, "block").map(|l| Site::Write(l, Layer::Attn)),
            [block, "ff"] => numbered(block, "block").map(|l| Site::Write(l, Layer::Ff)),
            [block, "attn", head] if head.starts_with("head") => numbered(block, "block")
                .zip(numbered(head, "head"))
                .map(|(l, h)| Site::Head(l, h)),
            [at @ .., "resid"] => depth_of(at).map(Site::Residual),
            [block, layer, table] if table.starts_with("table") => {
                let (block, index) = (numbered(block, "block"), numbered(table, "table"));
                block
                    .zip(index)
                    .zip(MemoryLayer::parse(layer))
                    .map(|((block, index), layer)| Site::Table { block, layer, index })
            }
            [at @ .., last] => depth_of(at).zip(group(last)).map(|(d, (group, index))| Site::Group {
                group,
                index,
                depth: Some(d),
            }),
            [] => None,
        };
        site.ok_or_else(|| {
            ModelError::Config(format!(
                "no site `{s}`: sites are named embedding, block1.attn, block0.ff, block1.attn.head3, slot5 or \
                 stream2 (at every depth), block0.attn.slot5 (after one depth), block0.ff.resid (the whole \
                 residual after a depth), block0.ml2.table3 (a Memory Layer's table)"
            ))
        })
    }
}

/// Where one site lives: a point and the columns of its tensor.
pub type Target = (Point, Range<usize>);

/// The points of a model, as `LanguageModel::edit_points` lists them, without their tensors.
#[derive(Clone, Debug, PartialEq)]
pub struct Points {
    /// (point, width, groups)
    pub all: Vec<(Point, usize, usize)>,
    /// What the residual's groups are, if it has any.
    pub group: Option<Group>,
}

impl Points {
    pub fn of<B: Backend>(points: &[EditPoint<'_, B>], group: Option<Group>) -> Self {
        Self {
            all: points.iter().map(|p| (p.point, p.width, p.groups)).collect(),
            group,
        }
    }

    fn get(&self, point: Point) -> Option<(usize, usize)> {
        self.all.iter().find(|(p, ..)| *p == point).map(|&(_, w, g)| (w, g))
    }

    /// The depths of the residual: the embedding's and one after each layer.
    pub fn depths(&self) -> usize {
        self.all
            .iter()
            .filter(|(p, ..)| matches!(p, Point::Residual(_)))
            .count()
    }

    /// Every site of this model, in forward order: the embedding, each block's tables, heads
    /// and writes, each group at every depth, and the residual after each depth.
    pub fn sites(&self) -> Vec<Site> {
        let mut sites = vec![Site::Embedding];
        for &(point, _, groups) in &self.all {
            match point {
                Point::Heads(l) => sites.extend((0..groups).map(|h| Site::Head(l, h))),
                Point::Write(l, layer) => sites.push(Site::Write(l, layer)),
                Point::Tables(block, layer) => {
                    sites.extend((0..groups).map(|index| Site::Table { block, layer, index }))
                }
                Point::Embedding | Point::Residual(_) => {}
            }
        }
        if let (Some(group), Some((_, n))) = (self.group, self.get(Point::Residual(0))) {
            sites.extend((0..n).map(|index| Site::Group {
                group,
                index,
                depth: None,
            }));
        }
        sites.extend((0..self.depths()).map(Site::Residual));
        sites
    }

    /// The points and columns `site` lives at in this model, or why it has none.
    pub fn targets(&self, site: Site) -> Result<Vec<Target>> {
        let missing = || {
            // A layer's tables as one range: a MemoryFormer has dozens.
            let mut names: Vec<String> = Vec::new();
            for s in self.sites() {
                match s {
                    Site::Table { block, layer, index } if index > 0 => {
                        let first = format!("block{block}.{}.table0", layer.word());
                        match names.last_mut() {
                            Some(last) if last.starts_with(&first) => *last = format!("{first}-{index}"),
                            _ => names.push(s.to_string()),
                        }
                    }
                    s => names.push(s.to_string()),
                }
            }
            ModelError::Config(format!(
                "this model has no site `{site}`; its sites are {}",
                names.join(", ")
            ))
        };
        let whole = |point: Point| self.get(point).map(|(w, _)| vec![(point, 0..w)]).ok_or_else(missing);
        let group_of = |point: Point, i: usize| {
            let (w, g) = self.get(point).ok_or_else(missing)?;
            match i < g {
                true => Ok((point, i * (w / g)..(i + 1) * (w / g))),
                false => Err(missing()),
            }
        };
        match site {
            Site::Embedding => whole(Point::Embedding),
            Site::Write(l, layer) => whole(Point::Write(l, layer)),
            Site::Head(l, h) => Ok(vec![group_of(Point::Heads(l), h)?]),
            Site::Residual(d) => whole(Point::Residual(d)),
            Site::Table { block, layer, index } => Ok(vec![group_of(Point::Tables(block, layer), index)?]),
            Site::Group { group, index, depth } => {
                if self.group != Some(group) {
                    return Err(missing());
                }
                match depth {
                    Some(d) => Ok(vec![group_of(Point::Residual(d), index)?]),
                    None => (0..self.depths())
                        .map(|d| group_of(Point::Residual(d), index))
                        .collect(),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_parses_back_to_its_site() {
        let sites = [
            Site::Embedding,
            Site::Write(1, Layer::Attn),
            Site::Write(0, Layer::Ff),
            Site::Head(2, 3),
            Site::Group {
                group: Group::Slot,
                index: 5,
                depth: None,
            },
            Site::Group {
                group: Group::Stream,
                index: 1,
                depth: Some(0),
            },
            Site::Group {
                group: Group::Slot,
                index: 0,
                depth: Some(4),
            },
            Site::Group {
                group: Group::SubBlock,
                index: 3,
                depth: Some(2),
            },
            Site::Group {
                group: Group::DepthBlock,
                index: 0,
                depth: Some(5),
            },
            Site::Residual(3),
            Site::Residual(0),
            Site::Table {
                block: 1,
                layer: MemoryLayer::Ml2,
                index: 7,
            },
            Site::Table {
                block: 0,
                layer: MemoryLayer::Qkv,
                index: 0,
            },
        ];
        for site in sites {
            assert_eq!(site.to_string().parse::<Site>().unwrap(), site, "{site}");
        }
        for bad in [
            "",
            "block",
            "blockx.attn",
            "block1.mlp",
            "head3",
            "block1.ff.head0",
            "slot",
            "x.resid",
            "block0.ml3.table1",
            "block0.ml2.table",
            "ml2.table1",
        ] {
            assert!(bad.parse::<Site>().is_err(), "{bad}");
        }
    }
}
