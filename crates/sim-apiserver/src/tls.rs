//! The per-cluster certificate authority and the API server's serving certificate.
//!
//! kubectl (client-go) sends no bearer token over plain HTTP and rustls refuses a CA used as
//! the end-entity certificate, so every simulated cluster gets its own CA and a separate
//! leaf for `127.0.0.1` and `localhost`, signed by it.

use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// Errors of certificate generation.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// rcgen failed to build a key or certificate.
    #[error("cannot generate the cluster certificates")]
    Generate(#[source] rcgen::Error),
    /// rustls refused the generated certificate or key.
    #[error("cannot configure tls")]
    Config(#[source] rustls::Error),
}

/// The cluster's CA and the server's certificate and key.
pub struct ClusterTls {
    /// CA certificate, PEM (goes into every kubeconfig).
    pub ca_pem: String,
    /// The rustls server configuration serving the leaf.
    pub server_config: Arc<rustls::ServerConfig>,
    /// The CA with its key, for the controllers' certificate signers
    /// (kube-controller-manager's `--cluster-signing-cert-file`/`--cluster-signing-key-file`).
    pub signing: SigningCa,
}

/// A CA that signs certificates: its certificate and private key (PKCS #8), both PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct SigningCa {
    /// The CA certificate.
    pub cert_pem: String,
    /// Its private key.
    pub key_pem: String,
}

impl std::fmt::Debug for SigningCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningCa")
            .field("cert_pem", &self.cert_pem)
            .finish_non_exhaustive()
    }
}

impl ClusterTls {
    /// Generates a fresh CA and a serving certificate for `127.0.0.1` and `localhost`.
    ///
    /// # Errors
    /// When key generation or signing fails.
    pub fn generate(cluster_name: &str) -> Result<Self, TlsError> {
        let ca_key = KeyPair::generate().map_err(TlsError::Generate)?;
        let mut ca_params =
            CertificateParams::new(Vec::<String>::new()).map_err(TlsError::Generate)?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, format!("{cluster_name}-ca"));
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca = CertifiedIssuer::self_signed(ca_params, ca_key).map_err(TlsError::Generate)?;

        let leaf_key = KeyPair::generate().map_err(TlsError::Generate)?;
        let mut leaf_params =
            CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
                .map_err(TlsError::Generate)?;
        leaf_params
            .distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        leaf_params.is_ca = IsCa::ExplicitNoCa;
        leaf_params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        leaf_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let leaf = leaf_params
            .signed_by(&leaf_key, &ca)
            .map_err(TlsError::Generate)?;

        let chain = vec![leaf.der().clone(), CertificateDer::from(ca.der().to_vec())];
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut server_config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(TlsError::Config)?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(TlsError::Config)?;
        server_config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let signing = SigningCa {
            cert_pem: ca.pem(),
            key_pem: ca.key().serialize_pem(),
        };
        Ok(Self {
            ca_pem: ca.pem(),
            server_config: Arc::new(server_config),
            signing,
        })
    }
}
