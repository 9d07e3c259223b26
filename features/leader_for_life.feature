@for-life
Feature: Leader for life
  An operator that elects its leader for life (operator-sdk's default) promises exactly one
  leader: the lock ConfigMap is owned by the leader's Pod and lives exactly as long as that
  Pod, so a standby leads only after the garbage collector has removed the lock of a Pod
  that is gone.

  Background:
    Given a cluster
    And the memcached operator is deployed with 3 replicas in for-life mode

  Scenario: Exactly one of three replicas owns the lock
    Then within 30s exactly one replica leads
    And the leader keeps leading for 3s
    And there was never more than one leader

  @audit
  Scenario: Deleting the leader Pod hands leadership to a standby after the lock is collected
    Given within 30s exactly one replica leads
    When the leader pod is deleted
    Then within 45s another replica leads
    And there was never more than one leader
    And no replica wrote after losing leadership

  @node-access
  Scenario: A leader whose container crashes keeps leadership in the same Pod
    Given within 30s exactly one replica leads
    When the leader's container crashes
    Then within 30s the same replica leads again
    And there was never more than one leader
