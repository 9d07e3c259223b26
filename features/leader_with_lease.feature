@lease
Feature: Leader with lease
  An operator that elects its leader with a coordination.k8s.io Lease promises that at
  most one replica leads at any moment, that a standby takes over once the leader stops
  renewing — no sooner than the lease allows and no later than the lease plus two retry
  periods — and that a replica that lost the lease writes nothing more.

  Background:
    Given a cluster
    And the memcached operator is deployed with 3 replicas in lease mode with timings 4s/3s/1s

  Scenario: Exactly one of three replicas holds the lease
    Then within 30s exactly one replica leads
    And the leader keeps leading for 3s
    And there was never more than one leader
    And the lease transitions never decreased

  @audit
  Scenario: A leader killed without releasing is replaced once its lease expires
    Given within 30s exactly one replica leads
    When the leader pod is force deleted
    Then within 20s another replica leads
    And the failover after the delete took at least 3s
    And the failover after the delete took at most 7s
    And there was never more than one leader
    And no replica wrote after losing leadership
    And the lease transitions never decreased

  @node-access @audit
  Scenario: A leader frozen for twice its lease is replaced and leads no more
    Given within 30s exactly one replica leads
    When the leader is frozen for 8s
    Then within 20s another replica leads
    And there was never more than one leader
    And no replica wrote after losing leadership
