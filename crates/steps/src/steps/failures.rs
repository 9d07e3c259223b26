//! What failed in a run, step by step: a cucumber writer that keeps each failed step's
//! scenario, text and error, so the run can end with a list of its failures (CI logs are
//! often read from the end) and the index page can say why a scenario failed.

use std::sync::{Arc, Mutex};

use cucumber::event::{self, Cucumber, RetryableScenario};
use cucumber::{Event, cli, parser};

use super::World;

/// One failed step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The feature's name.
    pub feature: String,
    /// The scenario's name.
    pub scenario: String,
    /// The step as the feature writes it, keyword included.
    pub step: String,
    /// Where the step is: `path:line`.
    pub location: String,
    /// Why it failed: the step's panic message or cucumber's error.
    pub error: String,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} / {}\n    {} ({})\n    {}",
            self.feature,
            self.scenario,
            self.step,
            self.location,
            self.error.replace('\n', "\n    ")
        )
    }
}

/// The writer: tee it beside the others; read what it kept with [`Failures::taken`].
#[derive(Debug, Clone, Default)]
pub struct Failures {
    kept: Arc<Mutex<Vec<Failure>>>,
}

impl Failures {
    /// The failures so far, in the order they happened; empties the list.
    pub fn taken(&self) -> Vec<Failure> {
        std::mem::take(&mut *self.kept.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn keep(&self, failure: Failure) {
        self.kept
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(failure);
    }
}

impl cucumber::Writer<World> for Failures {
    type Cli = cli::Empty;

    async fn handle_event(
        &mut self,
        event: parser::Result<Event<Cucumber<World>>>,
        _cli: &Self::Cli,
    ) {
        let Ok(event) = event else {
            return;
        };
        let Cucumber::Feature(feature, event) = event.value else {
            return;
        };
        let (scenario, RetryableScenario { event, .. }) = match event {
            event::Feature::Scenario(scenario, event) => (scenario, event),
            event::Feature::Rule(_, event::Rule::Scenario(scenario, event)) => (scenario, event),
            _ => return,
        };
        let (step, error) = match event {
            event::Scenario::Step(step, event::Step::Failed(_, _, _, error))
            | event::Scenario::Background(step, event::Step::Failed(_, _, _, error)) => {
                (step, error)
            }
            _ => return,
        };
        self.keep(Failure {
            feature: feature.name.clone(),
            scenario: scenario.name.clone(),
            step: format!("{}{}", step.keyword, step.value),
            location: format!(
                "{}:{}",
                feature
                    .path
                    .as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
                step.position.line
            ),
            error: step_error(&error).trim_end().to_owned(),
        });
    }
}

impl cucumber::writer::NonTransforming for Failures {}

/// A step error as a person reads it: a panic's message, not its `Any` box.
fn step_error(error: &event::StepError) -> String {
    match error {
        event::StepError::Panic(info) => info
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| info.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_else(|| "the step panicked with a value that is not text".into()),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panics_message_is_kept_as_text() {
        let text: event::StepError =
            event::StepError::Panic(Arc::new(String::from("within 30s: no leader")));
        assert_eq!(step_error(&text), "within 30s: no leader");
        let literal: event::StepError = event::StepError::Panic(Arc::new("two leaders"));
        assert_eq!(step_error(&literal), "two leaders");
        assert_eq!(
            step_error(&event::StepError::NotFound),
            "Step doesn't match any function"
        );
    }

    #[test]
    fn a_failure_reads_as_scenario_step_and_indented_error() {
        let failure = Failure {
            feature: "Lease".into(),
            scenario: "A killed leader is replaced".into(),
            step: "Then within 20s another replica leads".into(),
            location: "features/lease.feature:12".into(),
            error: "no new leader\nlast holder: a".into(),
        };
        assert_eq!(
            failure.to_string(),
            "Lease / A killed leader is replaced\n    Then within 20s another replica leads (features/lease.feature:12)\n    no new leader\n    last holder: a"
        );
    }
}
