"""The differential suite: one client script (scenarios.json, run by driver.py through
langgraph-sdk and by js/driver.mjs through LangGraph's JS SDK) against `langgraph dev`
and against turnkeeper on both backends, over the graphs of graphs/differential.py;
what differs must be on docs/langgraph-api.md's allow-list, and every row there must
still differ. `python -m tests.differential --report` prints what differs today."""
