//! A byte trie of token pieces, laid out in preorder so that a node's subtree is one range of
//! nodes and the tokens ending in it one range of `tokens`. Built once per vocabulary (see
//! `Vocab::grammar_trie`) and read by every grammar sampler on that model; immutable.

pub struct PieceTrie {
    /// Per node: its children are `edges[child_start[n]..child_start[n + 1]]`, sorted by byte.
    child_start: Vec<u32>,
    /// (byte, child node)
    edges: Vec<(u8, u32)>,
    /// Per node: the tokens whose piece ends here are `tokens[tok_start[n]..tok_start[n + 1]]`.
    tok_start: Vec<u32>,
    tokens: Vec<i32>,
    /// Per node: one past the last node of its subtree.
    subtree_end: Vec<u32>,
}

impl PieceTrie {
    /// A trie of the given (token, piece) pairs; empty pieces are left out.
    pub fn build<'a>(pieces: impl Iterator<Item = (i32, &'a [u8])>) -> PieceTrie {
        let mut all: Vec<(&[u8], i32)> = pieces.filter(|(_, p)| !p.is_empty()).map(|(id, p)| (p, id)).collect();
        all.sort_unstable();
        // Nodes are created in sorted (= preorder) order; `path[d]` is the node at depth d of the
        // previous piece.
        let mut children: Vec<Vec<(u8, u32)>> = vec![Vec::new()];
        let mut node_tokens: Vec<Vec<i32>> = vec![Vec::new()];
        let mut parent: Vec<u32> = vec![u32::MAX];
        let mut path: Vec<u32> = vec![0];
        let mut prev: &[u8] = &[];
        for &(piece, id) in &all {
            let common = prev.iter().zip(piece).take_while(|(a, b)| a == b).count();
            path.truncate(common + 1);
            for &b in &piece[common..] {
                let n = children.len() as u32;
                let p = *path.last().unwrap();
                children[p as usize].push((b, n));
                children.push(Vec::new());
                node_tokens.push(Vec::new());
                parent.push(p);
                path.push(n);
            }
            node_tokens[*path.last().unwrap() as usize].push(id);
            prev = piece;
        }
        let n = children.len();
        let mut subtree_end: Vec<u32> = (1..=n as u32).collect();
        for v in (1..n).rev() {
            let p = parent[v] as usize;
            subtree_end[p] = subtree_end[p].max(subtree_end[v]);
        }
        let mut child_start = Vec::with_capacity(n + 1);
        let mut edges = Vec::new();
        let mut tok_start = Vec::with_capacity(n + 1);
        let mut tokens = Vec::new();
        for v in 0..n {
            child_start.push(edges.len() as u32);
            edges.extend_from_slice(&children[v]);
            tok_start.push(tokens.len() as u32);
            tokens.extend_from_slice(&node_tokens[v]);
        }
        child_start.push(edges.len() as u32);
        tok_start.push(tokens.len() as u32);
        PieceTrie { child_start, edges, tok_start, tokens, subtree_end }
    }

    pub const ROOT: u32 = 0;

    pub fn n_nodes(&self) -> usize {
        self.subtree_end.len()
    }

    #[inline]
    pub fn children(&self, node: u32) -> &[(u8, u32)] {
        &self.edges[self.child_start[node as usize] as usize..self.child_start[node as usize + 1] as usize]
    }

    /// The tokens whose piece ends at `node`.
    #[inline]
    pub fn tokens_at(&self, node: u32) -> &[i32] {
        &self.tokens[self.tok_start[node as usize] as usize..self.tok_start[node as usize + 1] as usize]
    }

    /// The tokens whose piece goes through `node` (ends at it or below).
    pub fn tokens_below(&self, node: u32) -> &[i32] {
        let end = self.subtree_end[node as usize] as usize;
        &self.tokens[self.tok_start[node as usize] as usize..self.tok_start[end] as usize]
    }

    /// Bytes held (for statistics).
    pub fn bytes(&self) -> usize {
        self.child_start.len() * 4 + self.edges.len() * 8 + self.tok_start.len() * 4 + self.tokens.len() * 4 + self.subtree_end.len() * 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preorder_ranges() {
        let pieces: Vec<(i32, &[u8])> = vec![(0, b"ab"), (1, b"a"), (2, b"b"), (3, b"abc"), (4, b""), (5, b"ab")];
        let t = PieceTrie::build(pieces.into_iter());
        let a = t.children(PieceTrie::ROOT)[0];
        assert_eq!(a.0, b'a');
        assert_eq!(t.tokens_at(a.1), &[1]);
        let mut below = t.tokens_below(a.1).to_vec();
        below.sort();
        assert_eq!(below, vec![0, 1, 3, 5]);
        assert_eq!(t.tokens_below(PieceTrie::ROOT).len(), 5);
    }
}
