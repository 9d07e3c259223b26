@finalizers @memcached
Feature: Finalizers
  An operator that keeps state outside the objects it owns promises to clean it up before
  a Memcached disappears: the finalizer is on the object from its first reconcile, before
  anything is created for it; deleting the object runs the cleanup (its entry in the
  registry ConfigMap is removed and an Event `Finalized` recorded), and only then is the
  finalizer removed, the object let go and its Deployment collected. Cleanup that cannot
  be done yet keeps the object Terminating and is retried — while the API server refuses
  it, while no operator runs, and across a change of leader — and deleting a namespace
  finalizes every Memcached in it.

  Background:
    Given a cluster

  @audit
  Scenario: The finalizer is added on the first reconcile, before the Deployment is created
    Given the operator is deployed with 1 replica and the flags "--leader-election=none"
    When a Memcached "cache" of size 1 is created
    Then within 30s memcached "cache" carries the finalizer "cache.example.com/finalizer"
    And within 30s memcached "cache" has a Deployment of 1 replica owned by it
    And the finalizer was added to memcached "cache" before its Deployment was created

  Scenario: Deleting a Memcached runs its cleanup, then lets it go, and its Deployment is collected
    Given the operator is deployed with 1 replica and the flags "--leader-election=none"
    And a Memcached "cache" of size 2
    And within 30s the registry holds an entry for memcached "cache"
    When memcached "cache" is deleted
    Then within 30s memcached "cache" is gone
    And the registry holds no entry for memcached "cache"
    And an Event "Finalized" was recorded for memcached "cache"
    And within 30s the Deployment of memcached "cache" is gone

  @api-faults @audit
  Scenario: While the API server refuses the cleanup, the Memcached stays Terminating and the cleanup is retried
    Given the operator is deployed with 1 replica and the flags "--leader-election=none"
    And a Memcached "cache" of size 1
    And within 30s the registry holds an entry for memcached "cache"
    And the API server rejects changes to ConfigMap "memcached-registry" in the operator's namespace
    When memcached "cache" is deleted
    Then memcached "cache" stays Terminating with its finalizer for 2s
    And within 10s the API server refused the operator at least 3 times
    And the registry still holds an entry for memcached "cache"
    When the API server accepts changes to ConfigMap "memcached-registry" in the operator's namespace again
    Then within 30s memcached "cache" is gone
    And the registry holds no entry for memcached "cache"
    And an Event "Finalized" was recorded for memcached "cache"

  Scenario: With the operator scaled to 0, a deleted Memcached waits until the operator is back
    Given the operator is deployed with 1 replica and the flags "--leader-election=none"
    And a Memcached "cache" of size 1
    And within 30s the registry holds an entry for memcached "cache"
    When the operator is scaled to 0 replicas
    Then within 30s the operator has no pods
    When memcached "cache" is deleted
    Then memcached "cache" stays Terminating with its finalizer for 3s
    And the registry still holds an entry for memcached "cache"
    When the operator is scaled to 1 replica
    Then within 30s memcached "cache" is gone
    And the registry holds no entry for memcached "cache"
    And within 30s the Deployment of memcached "cache" is gone

  @api-faults @audit @for-life
  Scenario: A new leader completes a finalization its predecessor could not
    Given the operator is deployed with 2 replicas in for-life mode
    And within 30s exactly one replica leads
    And a Memcached "cache" of size 1
    And within 30s the registry holds an entry for memcached "cache"
    And the API server rejects changes to ConfigMap "memcached-registry" in the operator's namespace
    When memcached "cache" is deleted
    Then within 10s the API server refused the operator at least 2 times
    When the leader pod is deleted
    Then within 45s another replica leads
    When the API server accepts changes to ConfigMap "memcached-registry" in the operator's namespace again
    Then within 30s memcached "cache" is gone
    And the registry entry of memcached "cache" was removed by the new leader
    And an Event "Finalized" was recorded for memcached "cache"
    And the registry holds no entry for memcached "cache"
    And there was never more than one leader
    And no replica wrote after losing leadership

  Scenario: Deleting a namespace finalizes every Memcached in it, then the namespace goes away
    Given the operator is deployed with 1 replica and the flags "--leader-election=none"
    And 3 Memcached objects of size 1 in namespace "team-a"
    And within 30s the registry holds an entry for each of the Memcached objects
    When namespace "team-a" is deleted
    Then within 60s namespace "team-a" is gone
    And the registry holds no entry for any of the Memcached objects
