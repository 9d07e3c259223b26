@reconcile @memcached
Feature: Reconcile results
  A reconciling operator promises that the cluster converges on what each Memcached asks
  for, whatever happens on the way: every Memcached gets a Deployment of its size that it
  owns and a status naming its pods; a reconcile that changed something asks to run again,
  one that failed is retried later and later (exponential backoff) until it succeeds, one
  that is done waits for the next change or resync; and the API server, not the operator,
  refuses a Memcached that makes no sense. The results are those controller-runtime counts:
  success, error, requeue and requeue_after.

  Background:
    Given a cluster

  Scenario: A Memcached of size 3 gets a Deployment of 3 it owns and a status naming the pods
    Given the operator is deployed with 1 replica and the flags "--leader-election=none"
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
        labels:
          app: memcached
          memcached_cr: cache
      spec:
        replicas: 3
        template:
          spec:
            containers:
            - name: memcached
              image: memcached:1.6-alpine
      """
    And within 30s the Deployment "cache" is owned by the Memcached "cache"
    And within 30s the status of memcached "cache" lists its 3 pods
    And within 10s the reconcile results of memcached "cache" were requeue, then success

  Scenario: Growing a Memcached from 3 to 4 scales its Deployment and its status
    Given the operator is deployed with 1 replica and the flags "--leader-election=none"
    And a Memcached "cache" of size 3
    And within 30s the status of memcached "cache" lists its 3 pods
    When memcached "cache" is scaled to 4
    Then within 30s memcached "cache" has a Deployment of 4 replicas owned by it
    And within 30s the status of memcached "cache" lists its 4 pods
    And within 10s the reconcile results of memcached "cache" were requeue, then success, then requeue, then success

  # Alone (@serial), as is the resync below: their bounds (250 ms, 500 ms) are tighter than
  # what other scenarios' clusters add to the operator's API latency on a busy machine.
  @api-faults @audit @serial
  Scenario: While the API server refuses to create Deployments, reconciles fail and are retried later and later
    Given the operator is deployed with 1 replica and the flags "--leader-election=none"
    And the API server rejects requests to create deployments in namespace "default"
    When a Memcached "cache" of size 1 is created
    Then within 20s the API server refused the operator at least 9 times
    And the refused requests were retried at least 3 times at intervals that never shrank by more than 250ms and grew by at least 300ms
    And within 10s the reconcile results of memcached "cache" were error
    When the API server accepts requests to create deployments in namespace "default" again
    Then within 30s memcached "cache" has a Deployment of 1 replica owned by it
    And within 30s the status of memcached "cache" lists its 1 pod
    And within 10s the reconcile results of memcached "cache" were error, then requeue, then success

  @audit @serial
  Scenario: With a resync period of 2s, a Memcached is reconciled every 2s and nothing changes
    Given the operator is deployed with 1 replica and the flags "--leader-election=none --resync-period=2s"
    And a Memcached "cache" of size 1
    And within 30s memcached "cache" is available and no longer progressing
    Then for 7s memcached "cache" is reconciled every 2s, give or take 500ms, each time ending in requeue_after and writing nothing

  Scenario: Once a Memcached is gone, it is not reconciled again
    Given the operator is deployed with 1 replica and the flags "--leader-election=none --resync-period=2s"
    And a Memcached "cache" of size 1
    And within 30s memcached "cache" is available and no longer progressing
    When memcached "cache" is deleted
    Then within 30s memcached "cache" is gone
    And within 30s the Deployment of memcached "cache" is gone
    And within 10s the reconcile results of memcached "cache" were requeue, then requeue_after, then success
    And memcached "cache" is not reconciled again for 5s

  Scenario: A deleted Deployment is recreated
    Given the operator is deployed with 1 replica and the flags "--leader-election=none"
    And a Memcached "cache" of size 2
    And within 30s memcached "cache" has a Deployment of 2 replicas owned by it
    When the Deployment of memcached "cache" is deleted
    Then within 30s memcached "cache" has a new Deployment of 2 replicas owned by it
    And within 30s the status of memcached "cache" lists its 2 pods

  Scenario Outline: A Memcached of size <size> is refused by the API server, naming the field, and nothing changes
    Given the operator is deployed with 1 replica and the flags "--leader-election=none"
    And a Memcached "cache" of size 2
    And within 30s the status of memcached "cache" lists its 2 pods
    When a Memcached "other" of size <size> is submitted
    Then the API server refused it as Invalid, naming the field "spec.size"
    When memcached "cache" is changed to size <size>
    Then the API server refused it as Invalid, naming the field "spec.size"
    And memcached "other" does not exist
    And for 2s memcached "cache" keeps size 2 and a Deployment of 2 replicas

    Examples:
      | size    |
      | -1      |
      | "three" |

  Scenario: 50 Memcached objects created at once are all reconciled
    Given the operator is deployed with 1 replica and the flags "--leader-election=none"
    When 50 Memcached objects of size 1 are created at once in namespace "default"
    Then within 120s all the Memcached objects have their Deployment and list their pods
