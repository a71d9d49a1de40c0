//! A bounds-checked little-endian reader over untrusted bytes. Every read fails cleanly at the
//! end of input, and counts are checked against the bytes that remain before anything is sized by them.

pub struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Cursor { bytes, pos: 0 }
    }

    pub fn pos(&self) -> usize {
        self.pos
    }

    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    pub fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], String> {
        if n > self.remaining() {
            return Err(format!("truncated file: {what} needs {n} bytes at offset {}, {} remain", self.pos, self.remaining()));
        }
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    pub fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], String> {
        let s = self.take(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    pub fn u8(&mut self, what: &str) -> Result<u8, String> {
        Ok(self.array::<1>(what)?[0])
    }
    pub fn u16(&mut self, what: &str) -> Result<u16, String> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }
    pub fn u32(&mut self, what: &str) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    pub fn u64(&mut self, what: &str) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// A count of items each at least `min_item_len` bytes long, checked against what remains.
    pub fn count(&mut self, min_item_len: usize, what: &str) -> Result<usize, String> {
        let n = self.u64(what)?;
        let max = (self.remaining() / min_item_len.max(1)) as u64;
        if n > max {
            return Err(format!("{what} = {n} exceeds what the remaining {} bytes can hold", self.remaining()));
        }
        Ok(n as usize)
    }

    /// A GGUF string: u64 length then bytes, which must be UTF-8.
    pub fn string(&mut self, what: &str) -> Result<String, String> {
        let n = self.count(1, what)?;
        let b = self.take(n, what)?;
        String::from_utf8(b.to_vec()).map_err(|_| format!("{what} is not valid UTF-8"))
    }
}
