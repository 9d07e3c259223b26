@for-life
Feature: Leader for life
  An operator that elects its leader for life (operator-sdk's default) promises exactly one
  leader: the lock ConfigMap is owned by the leader's Pod and lives exactly as long as that
  Pod, so a standby leads only after the garbage collector has removed the lock of a Pod
  that is gone — never while the leader's Pod still exists, however long it is frozen or
  cut off. A leader Pod its kubelet evicted will never run again, so a standby — watching
  the leader's Pod — deletes it at once to free the lock.

  Background:
    Given a cluster
    And the operator is deployed with 3 replicas in for-life mode

  Scenario: Exactly one of three replicas owns the lock
    Then within 30s exactly one replica leads
    And the lock names the leader's Pod
    And within 15s the other replicas are ready standbys
    And the leader gauges sum to 1
    And the leader keeps leading for 3s
    And there was never more than one leader

  @audit @work
  Scenario: Deleting the leader Pod hands leadership to a standby after the lock is collected
    Given the operator has work
    And within 30s the operator has done work
    And within 30s exactly one replica leads
    When the leader pod is deleted
    Then within 45s another replica leads
    When the operator is given more work
    Then within 30s the leader has done the new work
    And the lock names the leader's Pod
    And there was never more than one leader
    And no replica wrote after losing leadership

  @node-access
  Scenario: A leader whose container crashes keeps leadership in the same Pod
    Given within 30s exactly one replica leads
    When the leader's container crashes
    Then within 30s the same replica leads again
    And the lock names the leader's Pod
    And there was never more than one leader

  @node-access @audit @work
  Scenario: A leader frozen for 20s keeps the lock and no standby takes over
    Given the operator has work
    And within 30s the operator has done work
    And within 30s exactly one replica leads
    When the leader is frozen for 20s
    Then within 10s the same replica leads again
    When the operator is given more work
    Then within 30s the leader has done the new work
    And the lock names the leader's Pod
    And there was never more than one leader
    And no replica wrote after losing leadership

  @node-access @audit @disruptive @work
  Scenario: A leader cut off from the API server keeps the lock until its Pod is force deleted
    Given the operator has work
    And within 30s the operator has done work
    And within 30s exactly one replica leads
    When the leader's node is cut off from the API server
    Then within 30s the old leader's Pod is terminating
    And the old leader's Pod stays terminating and the lock stays its own for 3s
    When the leader pod is force deleted
    Then within 45s another replica leads
    When the operator is given more work
    Then within 30s the leader has done the new work
    And no replica wrote after losing leadership

  # operator-sdk #1874 (operator-lib's isNotReadyNode): a standby that finds the leader's
  # node NotReady deletes the leader's Pod and the lock, and takes the lock, while the old
  # leader may still run. Here only the node's kubelet hangs: the node turns NotReady, the
  # old leader runs on and reaches the API server, and leader-for-life promises it keeps
  # the lock until its Pod is gone.
  @node-access @audit @disruptive @work
  Scenario: A leader whose kubelet hangs keeps the lock while it runs on
    Given the operator has work
    And within 30s the operator has done work
    And within 30s exactly one replica leads
    When the kubelet of the leader's node hangs
    Then within 90s the node of the hung kubelet is not ready
    And the leader keeps leading for 20s
    When the operator is given more work
    Then within 30s the leader has done the new work
    And there was never more than one leader
    And no replica wrote after losing leadership
    When the hung kubelet recovers

  @kubelet-faults @audit @work @timing
  Scenario: An evicted leader Pod is deleted by a standby, which then leads
    Given the operator has work
    And within 30s the operator has done work
    And within 30s exactly one replica leads
    When the leader pod is evicted by its kubelet
    Then within 5s the evicted Pod is gone, deleted by a standby
    And within 10s another replica leads
    And the lock names the leader's Pod
    And the failover after the evict took at most 3s
    When the operator is given more work
    Then within 30s the leader has done the new work
    And there was never more than one leader
    And no replica wrote after losing leadership

  Scenario: Deleting the lock by hand stops the old leader and exactly one leader follows
    Given within 30s exactly one replica leads
    When the lock is deleted by hand
    Then within 30s the old leader no longer leads
    And within 30s exactly one replica leads
    And there was never more than one leader

  Scenario: A rolling update moves leadership to a new Pod with at most one leader at a time
    Given within 30s exactly one replica leads
    When the operator Deployment is rolled out again
    Then within 60s the operator Deployment is rolled out
    And within 45s another replica leads
    And the failover after the rollout took at most 60s
    And there was never more than one leader
