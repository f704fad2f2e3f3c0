// The graph version's parts that need no service: canonical JSON as the Python side
// writes it, the shape of a LangGraph.js graph and what changes its fingerprint, and
// the stamp's next nodes and held channels.

import { Annotation, END, START, StateGraph } from "@langchain/langgraph";

import { canonical } from "../src/canonical.js";
import { GraphVersion, fingerprint, graphShape } from "../src/runner/version.js";

const State = Annotation.Root({
  job: Annotation<string>(),
  log: Annotation<string[]>({ reducer: (left, right) => left.concat(right), default: () => [] }),
});

function build(ask = "ask", interruptBefore: string[] = []) {
  return new StateGraph(State)
    .addNode(ask, () => ({ log: ["asked"] }))
    .addNode("answer", () => ({ log: ["answered"] }))
    .addEdge(START, ask)
    .addEdge(ask, "answer")
    .addEdge("answer", END)
    .compile({ interruptBefore: interruptBefore as never[] });
}

describe("canonical JSON", () => {
  it("sorts keys, has no spaces and escapes non-ASCII, as Python's json.dumps", () => {
    expect(canonical({ b: 1, a: ["é", { d: null, c: true }] })).toBe('{"a":["\\u00e9",{"c":true,"d":null}],"b":1}');
  });
});

describe("a graph's version", () => {
  it("is the same for the same graph and label, in any build", () => {
    expect(new GraphVersion(build() as never, "v1").fingerprint).toBe(new GraphVersion(build() as never, "v1").fingerprint);
  });

  it("changes with the label, a node's name, an interrupt point and a reducer", () => {
    const base = new GraphVersion(build() as never, "v1").fingerprint;
    const other = (graph: unknown, label = "v1") => new GraphVersion(graph as never, label).fingerprint;
    const reducer = new StateGraph(
      Annotation.Root({
        job: Annotation<string>(),
        log: Annotation<string[]>({ reducer: (left, right) => [...left, ...right], default: () => [] }),
      }),
    )
      .addNode("ask", () => ({}))
      .addNode("answer", () => ({}))
      .addEdge(START, "ask")
      .addEdge("ask", "answer")
      .addEdge("answer", END)
      .compile();
    const all = [base, other(build(), "v2"), other(build("confirm")), other(build("ask", ["answer"])), other(reducer)];
    expect(new Set(all).size).toBe(all.length);
  });

  it("describes nodes, edges, channels with their reducers, and the state", () => {
    const shape = graphShape(build() as never) as Record<string, Record<string, unknown>>;
    expect(Object.keys(shape.nodes)).toEqual(["__start__", "answer", "ask"]);
    expect(shape.edges).toContainEqual(["ask", "answer"]);
    expect(shape.channels.job).toBe("LastValue");
    expect(shape.channels.log).toMatch(/^BinaryOperatorAggregate\(reducer#[0-9a-f]{12}\)$/);
    expect(shape.state).toEqual({ job: "LastValue", log: "BinaryOperatorAggregate" });
    expect(fingerprint(shape, "v1")).toBe(new GraphVersion(build() as never, "v1").fingerprint);
  });
});

describe("a checkpoint's stamp", () => {
  it("names the nodes a channel written since they last ran triggers, and the channels held", () => {
    const version = new GraphVersion(build() as never, "v1");
    const stamp = version.stamp({
      channel_values: { job: "x", log: [], "branch:to:answer": null },
      channel_versions: { job: 2, log: 2, "branch:to:answer": 2 },
      versions_seen: { answer: {} },
    });
    expect(stamp.next).toEqual(["answer"]);
    expect(Object.keys(stamp.channels)).toEqual(["branch:to:answer", "job", "log"]);
    expect(stamp.fingerprint).toBe(version.fingerprint);
  });
});
