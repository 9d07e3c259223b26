@sim-only
Feature: The simulated control plane answers like kube-apiserver
  Every conformance feature runs by default against the embedded simulated control plane,
  so it must answer real clients as kube-apiserver does: one resource version for all
  writes, optimistic concurrency that refuses stale updates, and watches that resume
  exactly where they left off.

  Background:
    Given a simulated cluster

  Scenario: A stale update is refused with a conflict
    Given a ConfigMap "settings" in namespace "default"
    When the ConfigMap "settings" is updated twice from the same read
    Then the second update is refused with "Conflict"

  Scenario: A watch resumed from a resource version misses nothing
    Given a ConfigMap "first" in namespace "default"
    When 5 more ConfigMaps are created in namespace "default"
    Then a watch from the resource version of "first" sees 5 ADDED events within 5s
