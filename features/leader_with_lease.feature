@lease
Feature: Leader with lease
  An operator that elects its leader with a coordination.k8s.io Lease promises that at
  most one replica leads at any moment, that a standby takes over once the leader stops
  renewing — no sooner than the lease allows and no later than the lease plus two retry
  periods — that a leader which cannot renew steps down before anyone else may take over,
  and that a replica that lost the lease writes nothing more: its write guard refuses, and
  without the guard the harness catches the split brain.
  The bounds are written in the lease's own timings, as client-go names them
  (LeaseDuration, RenewDeadline, RetryPeriod), so the same scenarios judge an operator at
  whatever timings it runs with: one whose profile fixes its timings (a kubebuilder
  scaffold's 15s/10s/2s) runs every scenario at those instead of the timings stated.

  Background:
    Given a cluster

  Scenario: Exactly one of three replicas holds the lease
    Given the operator is deployed with 3 replicas in lease mode with timings 4s/3s/1s
    Then within 30s exactly one replica leads
    And the lock names the leader's Pod
    And the lease duration is LeaseDuration
    And the lease is renewed within RenewDeadline
    And the leader gauges sum to 1
    And within 15s the other replicas are ready standbys
    And the leader keeps leading for 3s
    And there was never more than one leader
    And the lease transitions never decreased

  @audit @work @release-on-cancel @timing
  Scenario: A leader that releases its lease on shutdown hands over within one retry period
    Given the operator is deployed with 3 replicas in lease mode with timings 4s/3s/1s, releasing its lease on shutdown
    And the operator has work
    And within 30s the operator has done work
    And within 30s exactly one replica leads
    When the leader pod is deleted
    Then within 10s another replica leads
    When the operator is given more work
    Then within 30s the leader has done the new work
    And the old leader released the lock after the delete and another took it within RetryPeriod
    And the lease transitions grew by exactly 1
    And there was never more than one leader
    And no replica wrote after losing leadership

  # kubernetes #131867 (PRs #132849 and #137988, "really hard to test"): the renewal in
  # flight when the leader shuts down is given up by the client and committed by the server
  # after the release read the lease, so the release's write conflicts with it. A release
  # that does not read again and retry on the conflict leaves the lease to expire: the
  # hand-over takes a whole LeaseDuration instead of a retry period.
  @audit @release-on-cancel @request-rules @timing
  Scenario: A renewal committed after the leader gave up on it does not hold up the release
    Given the operator is deployed with 3 replicas in lease mode with timings 4s/3s/1s, releasing its lease on shutdown
    And within 30s exactly one replica leads
    And within 15s the other replicas are ready standbys
    When the API server commits the leader's next lease update only after the leader reads the lease again, and loses its answer
    And the leader pod is deleted
    Then within 10s another replica leads
    And the old leader released the lock after the delete and another took it within RetryPeriod
    And there was never more than one leader

  # kubernetes PR #139991 (client-go releases the lease while OnStartedLeading still runs)
  # and controller-runtime #1132: a leader that releases its lease on shutdown before its
  # work has stopped lets a write still in flight land after a standby took the lease. A
  # write that reached the API server commits even if its client gives up on it: only a
  # leader that waits for its writes' answers before it releases holds this.
  @audit @work @release-on-cancel @request-rules
  Scenario: A leader that releases its lease on shutdown lets its work end first
    Given the operator is deployed with 3 replicas in lease mode with timings 4s/3s/1s, releasing its lease on shutdown
    And the operator has work
    And within 30s the operator has done work
    And within 30s exactly one replica leads
    And within 15s the other replicas are ready standbys
    When the API server holds the leader's next write of its work for LeaseDuration and then commits it
    And the leader pod is deleted
    Then within 10s another replica leads
    And within LeaseDuration the held write of its work was committed
    And only the lock's holder ever wrote the work
    And there was never more than one leader

  # controller-runtime #2719: a manager that never led started its leader-only runnables
  # while shutting down (fixed by #2724).
  @audit @work
  Scenario: A standby that shuts down does not start the leader's work
    Given the operator is deployed with 3 replicas in lease mode with timings 4s/3s/1s
    And the operator has work
    And within 30s the operator has done work
    And within 30s exactly one replica leads
    And within 15s the other replicas are ready standbys
    When a standby pod is deleted
    Then the leader keeps leading for 3s
    When the operator is given more work
    Then within 30s the leader has done the new work
    And only the lock's holder ever wrote the work
    And there was never more than one leader

  # kubernetes #47671: a candidate judged the lease by its own LeaseDuration, not the one
  # its holder wrote; a rolling update that shortens the timings mixes the two.
  @audit @work
  Scenario: A rolling update that shortens the lease timings keeps a single leader
    Given the operator is deployed with 3 replicas in lease mode with timings 8s/6s/2s
    And the operator has work
    And within 30s the operator has done work
    And within 30s exactly one replica leads
    When the operator is rolled out with timings 4s/3s/1s
    Then within 120s the operator Deployment is rolled out
    And within 30s exactly one replica leads
    When the operator is given more work
    Then within 30s the leader has done the new work
    And there was never more than one leader
    And no replica wrote after losing leadership

  @audit @work @timing
  Scenario: A leader killed without releasing is replaced once its lease expires
    Given the operator is deployed with 3 replicas in lease mode with timings 4s/3s/1s
    And the operator has work
    And within 30s the operator has done work
    And within 30s exactly one replica leads
    When the leader pod is force deleted
    Then within 5 × LeaseDuration another replica leads
    When the operator is given more work
    Then within 30s the leader has done the new work
    And the new leader took over between LeaseDuration and LeaseDuration + 2 × RetryPeriod after the old leader's last renewal
    And there was never more than one leader
    And no replica wrote after losing leadership
    And the lease transitions never decreased

  @node-access @audit @work @timing
  Scenario: A leader cut off from the API server steps down before a standby takes over
    Given the operator is deployed with 3 replicas in lease mode with timings 4s/3s/1s
    And the operator has work
    And within 30s the operator has done work
    And within 30s exactly one replica leads
    When the leader is cut off from the API server for 2 × LeaseDuration
    Then within 5 × LeaseDuration another replica leads
    When the operator is given more work
    Then within 30s the leader has done the new work
    And the old leader stopped leading at most RenewDeadline + RetryPeriod / 2 after the partition
    And the new leader took over between LeaseDuration and LeaseDuration + 2 × RetryPeriod after the old leader's last renewal
    And there was never more than one leader
    And no replica wrote after losing leadership

  @node-access @audit
  # Frozen while idle: a process stopped between its write guard's check and the send of
  # the write it allowed sends that write when it wakes, whatever the margins (no check in
  # the client can close that window). The next scenario freezes a leader in the middle of
  # a reconcile, at a request, where the guard's next check refuses the stale write.
  @work
  Scenario: A leader frozen for twice its lease is replaced and leads no more
    Given the operator is deployed with 3 replicas in lease mode with timings 4s/3s/1s
    And the operator has work
    And within 30s the operator has done work
    And within 30s exactly one replica leads
    And the operator has been idle for 1s
    When the leader is frozen for 2 × LeaseDuration
    Then within 5 × LeaseDuration another replica leads
    When the operator is given more work
    Then within 30s the leader has done the new work
    And within LeaseDuration + RetryPeriod the old leader no longer leads
    And there was never more than one leader
    And no replica wrote after losing leadership

  @request-rules @audit @memcached
  Scenario: A leader frozen in the middle of a reconcile wakes after the takeover and its write guard refuses the stale write
    Given the operator is deployed with 3 replicas in lease mode with timings 4s/3s/1s
    And a Memcached "cache" of size 1
    And within 30s memcached "cache" has a Deployment of 1 replica owned by it
    And within 30s exactly one replica leads
    And the operator has been idle for 1s
    When memcached "cache" is scaled to 2 while the leader is frozen for 2 × LeaseDuration as it reads the Deployment
    Then within 5 × LeaseDuration another replica leads
    And within 30s memcached "cache" has a Deployment of 2 replicas owned by it
    And within 20s the old leader logs "write refused"
    And there was never more than one leader
    And no replica wrote after losing leadership

  @request-rules @audit @memcached
  Scenario: Without the write guard the same frozen leader writes after the takeover, and the checkers report the split brain
    Given the operator is deployed with 3 replicas in lease mode with timings 4s/3s/1s and flags "--write-guard off"
    And a Memcached "cache" of size 1
    And within 30s memcached "cache" has a Deployment of 1 replica owned by it
    And within 30s exactly one replica leads
    And the operator has been idle for 1s
    When memcached "cache" is scaled to 2 while the leader is frozen for 2 × LeaseDuration as it reads the Deployment
    Then within 5 × LeaseDuration another replica leads
    And within 30s memcached "cache" has a Deployment of 2 replicas owned by it
    And within 30s the single-writer check reports a stale writer
    And within 30s the single-leader check reports two leaders

  @api-faults
  Scenario: Lease updates rejected for less than the renew deadline keep the leader
    Given the operator is deployed with 3 replicas in lease mode with timings 6s/5s/1s
    And within 30s exactly one replica leads
    When the API server rejects the leader's lease updates for 2 × RetryPeriod
    Then the leader keeps leading for RenewDeadline - 2 × RetryPeriod
    And the lease transitions grew by exactly 0
    And there was never more than one leader

  # controller-runtime #3027: one renewal slower than the leader-election client's request
  # timeout (RenewDeadline / 2), yet answered within RenewDeadline, must not cost the leader
  # its lease. Held just past RenewDeadline / 2, well below RenewDeadline - RetryPeriod, so
  # that a leader counting its deadline from its last successful renewal, not from the
  # attempt, also gets the answer in time when its attempt reaches the server late on a
  # loaded machine (a quarter of a retry period over proved too little).
  @request-rules
  Scenario: One lease update held past half the renew deadline keeps the leader
    Given the operator is deployed with 3 replicas in lease mode with timings 4s/3s/1s
    And within 30s exactly one replica leads
    And within 15s the other replicas are ready standbys
    When the API server holds the leader's next lease update for RenewDeadline / 2 + RetryPeriod / 10
    Then the leader keeps leading for LeaseDuration + 2 × RetryPeriod
    And the lease transitions grew by exactly 0
    And there was never more than one leader

  @api-faults @timing
  Scenario: Lease updates rejected for longer than the renew deadline make the leader step down
    Given the operator is deployed with 3 replicas in lease mode with timings 4s/3s/1s
    And within 30s exactly one replica leads
    When the API server rejects the leader's lease updates for 2 × RenewDeadline
    Then within 5 × LeaseDuration another replica leads
    And the old leader stopped leading at most RenewDeadline + RetryPeriod / 2 after the reject
    And there was never more than one leader

  @request-rules
  # Two standbys that both saw the lease expire both write it to take it. An elector that
  # updates the Lease with the resourceVersion it read (client-go, ours) gets 409 Conflict
  # for the second write; one that writes without that precondition (a merge patch of
  # holderIdentity) is not refused: the second write silently replaces the holder the
  # first had just written, and both believe they lead until their next try. The request
  # rules (in the simulated API server, or in the pods' proxies on local) make the race
  # happen every time: C's write waits until B's has arrived, B's until C's has been
  # answered, so B's — sent before B could see C's — lands second.
  # The leader is frozen, not deleted: a deleted one's replacement Pod would be a third
  # candidate that might take the lease before B and C try. The long lease keeps a write
  # held while the other standby is still waiting for the lease to expire (up to about
  # 4.4 s with client-go's jittered retries) within controller-runtime's client timeout of
  # RenewDeadline / 2.
  Scenario: Of two standbys taking an expired lease at once, the second is refused instead of overwriting the first
    Given the operator is deployed with 3 replicas in lease mode with timings 12s/10s/1s
    And within 30s exactly one replica leads
    And within 20s the other replicas are ready standbys
    When two standbys' next lock writes are made to race
    And the leader is frozen
    Then within 30s another replica leads
    And within 20s the two standbys' lock writes raced
    And the lock changed hands exactly once after the hold
    And there was never more than one leader

  @kubelet-faults @clock-skew
  Scenario: A standby whose clock runs ahead does not take a live lease
    Given the operator is deployed with 3 replicas in lease mode with timings 4s/3s/1s
    And within 30s exactly one replica leads
    And within 30s the other replicas are ready standbys
    When a standby's clock runs 30s ahead
    Then the leader keeps leading for LeaseDuration + 2 × RetryPeriod
    And there was never more than one leader

  Scenario: Two operators configured with the same lock: only one of them ever leads
    Given the operator is deployed with 1 replica in lease mode with timings 4s/3s/1s
    And a second operator "other" is deployed with 1 replica in lease mode with timings 4s/3s/1s and the same lock
    Then within 30s exactly one replica leads
    And the leader keeps leading for 3s
    And there was never more than one leader

  @memcached
  Scenario: Invalid timings stop the operator before it touches the lease
    Given the operator is deployed with 2 replicas in lease mode with timings 3s/3s/1s
    Then within 30s every operator pod has failed with "--lease-duration (3s) must be greater than --renew-deadline (3s)"
    And there is no lease

  Scenario: Without rights to leases nobody leads until the Role allows them
    Given the operator is deployed with 2 replicas in lease mode with timings 4s/3s/1s and no right to leases
    Then within 30s an operator pod logs "forbidden"
    And no replica leads for 2s
    When the operator's Role is given its rights to leases
    Then within 30s exactly one replica leads
    And there was never more than one leader

  @slow @audit @work @timing
  Scenario: With the production timings a killed leader is replaced within the lease plus two retry periods
    Given the operator is deployed with 3 replicas in lease mode with timings 15s/10s/2s
    And the operator has work
    And within 30s the operator has done work
    And within 40s exactly one replica leads
    When the leader pod is force deleted
    Then within 40s another replica leads
    When the operator is given more work
    Then within 30s the leader has done the new work
    And the new leader took over between LeaseDuration and LeaseDuration + 2 × RetryPeriod after the old leader's last renewal
    And there was never more than one leader
    And no replica wrote after losing leadership
