//! STUB (replaced): server-side apply.
use serde_json::Value;
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("conflict")]
    Conflict(Vec<(String, String)>),
}
impl Error {
    pub fn conflicts(&self) -> Option<Vec<(String, String)>> {
        match self {
            Self::Conflict(c) => Some(c.clone()),
        }
    }
}
pub fn apply(
    live: Option<&Value>,
    applied: &Value,
    _m: &str,
    _f: bool,
    _k: &str,
    _n: &str,
    _s: Option<&str>,
) -> Result<Value, Error> {
    let mut t = live.cloned().unwrap_or(serde_json::json!({}));
    json_patch::merge(&mut t, applied);
    Ok(t)
}
pub fn record_update(_o: &Value, _n: &mut Value, _m: &str, _k: &str, _now: &str, _s: Option<&str>) {
}
