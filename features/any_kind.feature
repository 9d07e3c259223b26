@any-kind @memcached
Feature: Steps for any kind
  What an author states about the objects of their own operator, with no step written in
  Rust: objects applied from YAML; an object that matches a partial YAML (maps by the keys
  stated, arrays element by element, `null` for a field not set) within a bound or
  throughout a span; its owner, conditions, finalizers and Events; a field that keeps its
  value; whether the operator wrote an object since a checkpoint (from the audit); an
  object deleted and gone. The bundled operator's Memcached is the example: each step
  takes any kind, named as kubectl names it.

  Background:
    Given a cluster
    And the operator is deployed with 1 replica and the flags "--leader-election=none"

  @audit
  Scenario: A Memcached applied from YAML gets its Deployment, its conditions and its finalizer
    When these objects are applied:
      """
      apiVersion: cache.example.com/v1alpha1
      kind: Memcached
      metadata:
        name: cache
      spec:
        size: 2
      """
    Then within 30s these objects match:
      """
      apiVersion: apps/v1
      kind: Deployment
      metadata:
        name: cache
      spec:
        replicas: 2
        template:
          spec:
            containers:
            - name: memcached
      ---
      apiVersion: cache.example.com/v1alpha1
      kind: Memcached
      metadata:
        name: cache
        deletionTimestamp: null
      spec:
        size: 2
      """
    And within 30s the Deployment "cache" is owned by the Memcached "cache"
    And within 30s the Memcached "cache" carries the finalizer "cache.example.com/finalizer"
    And within 30s the Memcached "cache" has the condition "Available" with status "True" and reason "MinimumReplicasAvailable"
    And within 30s an Event "Created" is recorded about the Memcached "cache"
    Given a checkpoint "settled"
    Then the field ".spec.replicas" of the Deployment "cache" keeps the value "2" for 2s
    And the operator did not write the Deployment "cache" since the checkpoint "settled"
    When these objects are applied:
      """
      apiVersion: cache.example.com/v1alpha1
      kind: Memcached
      metadata:
        name: cache
      spec:
        size: 3
      """
    Then within 30s these objects match:
      """
      apiVersion: apps/v1
      kind: Deployment
      metadata:
        name: cache
      spec:
        replicas: 3
      """
    And the operator wrote the Deployment "cache" since the checkpoint "settled"
    And these objects keep matching for 2s:
      """
      apiVersion: apps/v1
      kind: Deployment
      metadata:
        name: cache
      spec:
        replicas: 3
      """

  Scenario: A Memcached deleted by kind and name is finalized and gone, its Deployment collected
    Given these objects are applied:
      """
      apiVersion: cache.example.com/v1alpha1
      kind: Memcached
      metadata:
        name: cache
      spec:
        size: 1
      """
    And within 30s the memcacheds.cache.example.com "cache" carries the finalizer "cache.example.com/finalizer"
    When the Memcached "cache" is deleted
    Then within 30s the Memcached "cache" is gone
    And within 30s an Event "Finalized" is recorded about the Memcached "cache"
    And within 30s the deployments "cache" is gone
