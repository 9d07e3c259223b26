//! Prints the Memcached CRD as YAML (the source of `config/crd/cache.example.com_memcacheds.yaml`).
fn main() -> Result<(), serde_yaml::Error> {
    print!("{}", memcached_operator::crd_yaml()?);
    Ok(())
}
