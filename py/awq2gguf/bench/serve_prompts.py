"""What bench serve's chat and speculation runs ask: conversations' turns, code edits whose answer
rewrites a given function (n-gram drafts find it in the prompt), and questions whose answer is new
text."""

CHAT_OPENERS = [
    "I am planning a week of walking in the Scottish Highlands in May. What should I pack?",
    "Explain how a hash table handles two keys that land in the same bucket.",
    "I want to learn to bake bread at home. Where do I start?",
    "What are the trade-offs between renting and buying a flat in a large city?",
]

FOLLOW_UPS = [
    "Can you say more about the most important point?",
    "Give me an example.",
    "What is a common mistake people make here?",
    "Summarise what we discussed so far in two sentences.",
    "What would you do differently on a small budget?",
]

_FUNCTIONS = [
    '''def merge_intervals(intervals):
    if not intervals:
        return []
    intervals = sorted(intervals, key=lambda pair: pair[0])
    merged = [list(intervals[0])]
    for start, end in intervals[1:]:
        last = merged[-1]
        if start <= last[1]:
            last[1] = max(last[1], end)
        else:
            merged.append([start, end])
    return [tuple(pair) for pair in merged]
''',
    '''def word_counts(path, min_length=3):
    counts = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            for word in line.lower().split():
                word = word.strip(".,;:!?\\"'()")
                if len(word) < min_length:
                    continue
                counts[word] = counts.get(word, 0) + 1
    ranked = sorted(counts.items(), key=lambda item: item[1], reverse=True)
    return ranked[:20]
''',
    '''def moving_average(values, window):
    if window <= 0:
        raise ValueError("window must be positive")
    averages = []
    total = 0.0
    for i, value in enumerate(values):
        total += value
        if i >= window:
            total -= values[i - window]
        if i >= window - 1:
            averages.append(total / window)
    return averages
''',
]

_EDITS = [
    "Add a docstring to this Python function; keep the rest as it is. Answer with the whole function.",
    "Add type hints to this Python function's parameters and return value; keep the rest as it is. Answer "
    "with the whole function.",
    "Rename this Python function to snake-case words that say what it does better, and keep the rest as it "
    "is. Answer with the whole function.",
]

SPECULATION_PROMPTS = {
    "code edits": [f"{edit}\n\n```python\n{code}```" for edit, code in zip(_EDITS, _FUNCTIONS)],
    "questions": [
        "Explain in a few sentences why the sky is blue.",
        "Write a short story about a lighthouse keeper who finds a message in a bottle.",
        "What should I think about when choosing a programming language for a new web service?",
    ],
}
