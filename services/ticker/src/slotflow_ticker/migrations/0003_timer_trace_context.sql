-- The W3C traceparent of the StartTimer that set the timer (NULL while tracing is off, or when the
-- command carried none): what the timer fires (a run's retry attempt, a workflow's TimerFired)
-- continues that trace, however long the timer waited and whichever ticker fires it.
ALTER TABLE {schema}.timers ADD COLUMN trace_parent text;
