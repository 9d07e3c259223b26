//! Prints the Store and Batch CRDs as YAML (the source of
//! `config/crd/workloads.example.com.yaml`).
fn main() -> Result<(), serde_yaml::Error> {
    print!("{}", workloads_operator::crd::crds_yaml()?);
    Ok(())
}
