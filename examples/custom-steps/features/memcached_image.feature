@memcached
Feature: The bundled operator's Memcached runs memcached
  An author's own feature: opconform's steps set the scene, a step of the author's own
  crate (tests/e2e.rs) states what only their suite knows.

  Scenario: A Memcached's Deployment runs the memcached image
    Given a cluster
    And the operator is deployed with 1 replica and the flags "--leader-election=none"
    When these objects are applied:
      """
      apiVersion: cache.example.com/v1alpha1
      kind: Memcached
      metadata:
        name: cache
      spec:
        size: 1
      """
    Then within 30s the Deployment "cache" is owned by the Memcached "cache"
    And within 30s the Deployment "cache" runs the image "memcached:1.6-alpine"
