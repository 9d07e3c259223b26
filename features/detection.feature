@detection @memcached
Feature: The checkers catch an operator that breaks its promise
  A check that cannot fail proves nothing. These scenarios run the operator in a way that
  breaks a guarantee on purpose — two replicas reconciling without any leader election,
  made to take turns by freezing one at a time so that both surely write — and assert that the single-writer and single-leader checkers report it, with the slice
  of history that shows it in the scenario's timeline.

  Background:
    Given a cluster

  @audit @node-access
  Scenario: Two replicas without leader election both write, and the checkers say so
    Given the operator is deployed with 2 replicas and the flags "--leader-election=none"
    And a Memcached "cache" of size 1
    And within 30s memcached "cache" has a Deployment of 1 replica owned by it
    And within 60s every operator replica runs
    When one operator replica is frozen
    And memcached "cache" is scaled to 2
    Then within 30s memcached "cache" has a Deployment of 2 replicas owned by it
    When the frozen replica is released and another one is frozen
    And memcached "cache" is scaled to 3
    Then within 30s memcached "cache" has a Deployment of 3 replicas owned by it
    When the frozen replica is released and another one is frozen
    And memcached "cache" is scaled to 4
    Then within 30s memcached "cache" has a Deployment of 4 replicas owned by it
    When the frozen replica is released
    Then within 30s the single-writer check reports a stale writer
    And within 30s the single-leader check reports two leaders
