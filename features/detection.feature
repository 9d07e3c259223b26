@detection @memcached
Feature: The checkers catch an operator that breaks its promise
  A check that cannot fail proves nothing. These scenarios run the operator in a way that
  breaks a guarantee on purpose — two replicas reconciling without any leader election —
  and assert that the single-writer and single-leader checkers report it, with the slice
  of history that shows it in the scenario's timeline.

  Background:
    Given a cluster

  @audit
  Scenario: Two replicas without leader election both write, and the checkers say so
    Given the operator is deployed with 2 replicas and the flags "--leader-election=none"
    And a Memcached "cache" of size 1
    And within 30s memcached "cache" has a Deployment of 1 replica owned by it
    When memcached "cache" is scaled to 2
    And memcached "cache" is scaled to 3
    And memcached "cache" is scaled to 4
    Then within 30s memcached "cache" has a Deployment of 4 replicas owned by it
    And within 30s the single-writer check reports a stale writer
    And within 30s the single-leader check reports two leaders
