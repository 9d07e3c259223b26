//! STUB (replaced): patches.
use serde_json::Value;
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("bad patch")]
    Bad,
}
pub fn merge_patch(t: &mut Value, p: &Value) {
    json_patch::merge(t, p)
}
pub fn json_patch(_t: &mut Value, _p: &Value) -> Result<(), Error> {
    Err(Error::Bad)
}
pub fn strategic_merge_patch(o: &Value, p: &Value, _k: &str) -> Result<Value, Error> {
    let mut t = o.clone();
    json_patch::merge(&mut t, p);
    Ok(t)
}
