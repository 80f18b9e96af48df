"""Working with the digits images as numpy arrays: reshaping, indexing, imshow, a k-NN classifier and its confusion matrix.

Typical array mistakes: reshaping to the wrong size, broadcasting arrays of
different shapes, indexing past the end, passing 3-D images to a model; the
user restarts twice (once after a messy out-of-order state).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # data/ is not a package: make_logs.py loads this file by path
    from make_logs import Notebook

USER = "user_07"
NOTEBOOK = "digits.ipynb"
START = "2025-03-11T16:02:00+00:00"


def script(nb: Notebook) -> None:
    imports = nb.add("import numpy as np\nimport matplotlib.pyplot as plt\nfrom sklearn.datasets import load_digits")
    nb.run(imports)
    load = nb.add("digits = load_digits()\ndigits.images.shape, digits.data.shape")
    nb.run(load)
    first = nb.add("digits.images[0]")
    nb.run(first)
    show = nb.add("plt.imshow(digits.images[0], cmap='gray_r')\nplt.title(digits.target[0])\nplt.show()")
    nb.run(show)
    reshape = nb.add("digits.data[0].reshape(9, 9)")
    nb.run(reshape)
    nb.fix(reshape, "reshape(9, 9)", "reshape(8, 8)")
    nb.run(reshape)
    same = nb.add("np.array_equal(digits.data[0].reshape(8, 8), digits.images[0])")
    nb.run(same)
    gallery = nb.add(
        "fig, axes = plt.subplots(2, 5, figsize=(8, 3.5))\n"
        "for ax, img, label in zip(axes.flat, digits.images, digits.target):\n"
        "    ax.imshow(img, cmap='gray_r')\n"
        "    ax.set_title(label)\n"
        "    ax.axis('off')\n"
        "plt.show()"
    )
    nb.run(gallery)
    counts = nb.add("np.bincount(digits.target)")
    nb.run(counts)
    means = nb.add("mean_images = np.stack([digits.images[digits.target == d].mean(axis=0) for d in range(10)])\nmean_images.shape")
    nb.run(means)
    centered = nb.add("centered = digits.images - mean_images\ncentered.shape")
    nb.run(centered)
    nb.fix(centered, "digits.images - mean_images", "digits.images - mean_images[digits.target]")
    nb.run(centered)
    norms = nb.add("np.linalg.norm(centered.reshape(len(centered), -1), axis=1)[:8].round(2)")
    nb.run(norms)
    nb.save()
    mean_plot = nb.add(
        "fig, axes = plt.subplots(1, 10, figsize=(10, 1.5))\n"
        "for d, ax in enumerate(axes):\n"
        "    ax.imshow(mean_images[d], cmap='viridis')\n"
        "    ax.axis('off')\n"
        "plt.show()"
    )
    nb.run(mean_plot)
    pixel = nb.add("digits.images[0][8, 0]")
    nb.run(pixel)
    nb.fix(pixel, "digits.images[0][8, 0]", "digits.images[0][7, 0], digits.images[0].max()")
    nb.run(pixel)
    split = nb.add(
        "from sklearn.model_selection import train_test_split\n"
        "X_train, X_test, y_train, y_test = train_test_split(digits.images, digits.target, test_size=0.3, random_state=1)\n"
        "X_train.shape"
    )
    nb.run(split)
    knn = nb.add("from sklearn.neighbors import KNeighborsClassifier\nknn = KNeighborsClassifier(n_neighbors=3).fit(X_train, y_train)")
    nb.run(knn)
    nb.fix(split, "train_test_split(digits.images,", "train_test_split(digits.data,")
    nb.run(split)
    nb.run(knn)
    score = nb.add("knn.score(X_test, y_test)")
    nb.run(score)
    ks = nb.add(
        "for k in [1, 3, 5, 9, 15]:\n"
        "    acc = KNeighborsClassifier(n_neighbors=k).fit(X_train, y_train).score(X_test, y_test)\n"
        "    print(k, round(acc, 4))"
    )
    nb.run(ks)
    pred = nb.add("pred = knn.predict(X_test)\n(pred != y_test).sum()")
    nb.run(pred)
    cm = nb.add("from sklearn.metrics import confusion_matrix\ncm = confusion_matrix(y_test, pred)\ncm")
    nb.run(cm)
    cm_plot = nb.add(
        "plt.imshow(cm, cmap='Blues')\n"
        "plt.xlabel('predicted'); plt.ylabel('true')\n"
        "plt.colorbar()\nplt.show()"
    )
    nb.run(cm_plot)
    wrong = nb.add("wrong = np.flatnonzero(pred != y_test)[:6]\nwrong")
    nb.run(wrong)
    wrong_plot = nb.add(
        "fig, axes = plt.subplots(1, len(wrong), figsize=(2 * len(wrong), 2))\n"
        "for ax, i in zip(axes, wrong):\n"
        "    ax.imshow(X_test[i], cmap='gray_r')\n"
        "    ax.set_title(f'{y_test[i]} -> {pred[i]}')\n"
        "plt.show()"
    )
    nb.run(wrong_plot)
    nb.fix(wrong_plot, "ax.imshow(X_test[i], cmap='gray_r')", "ax.imshow(X_test[i].reshape(8, 8), cmap='gray_r')\n    ax.axis('off')")
    nb.run(wrong_plot)
    nb.save()
    nb.restart()
    nb.run_all()
    binarize = nb.add("binary = (digits.data > 8).astype(np.uint8)\nbinary[:2]")
    nb.run(binarize)
    bin_score = nb.add("KNeighborsClassifier(3).fit(binary[:1000], digits.target[:1000]).score(binary[1000:], digits.target[:797])")
    nb.run(bin_score)
    nb.fix(bin_score, "digits.target[:797]", "digits.target[1000:]")
    nb.run(bin_score)
    dtype = nb.add("binary.dtype, binary.nbytes, digits.data.nbytes")
    nb.run(dtype)
    nb.run(score)
    nb.restart()
    nb.run(score)
    nb.run_all()
    nb.save()
