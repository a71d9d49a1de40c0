//! Fallible allocation for buffers sized by input (context sizes, batch sizes): a failed
//! allocation becomes an error with a reason instead of an abort.

/// A vector of `n` default values, or an error naming `what` when memory is short.
pub fn try_zeroed<T: Clone + Default>(n: usize, what: &str) -> Result<Vec<T>, String> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| format!("cannot allocate {} bytes for {what}", n.saturating_mul(std::mem::size_of::<T>())))?;
    v.resize(n, T::default());
    Ok(v)
}
