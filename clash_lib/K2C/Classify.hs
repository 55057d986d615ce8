{-# LANGUAGE TupleSections, DataKinds, KindSignatures, NoImplicitPrelude, ScopedTypeVariables,
             TypeApplications, TypeOperators, FlexibleContexts, TypeFamilies, NoStarIsType,
             RankNTypes, PolyKinds, AllowAmbiguousTypes #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
The predicted class of a beat, pipelined: the output activation applied to
the beat's values and registered, then the argmax of the values as a
balanced tree of comparisons with a register after every level, the
activation's output riding beside it.

= Arithmetic

The class is the lowest index among the maxima (as 'K2C.Activation.argmax'
and the golden model): a level keeps its left (lower) candidate unless the
right one is strictly greater; the tree is padded on the right with
@minBound@ values, which never win.

= Hardware and timing

A first register holds the beat as it comes (often straight from a queue's
LUT RAM, whose read multiplexers would otherwise sit before a table's index
arithmetic and its block RAM's address: digits_dense on ECP5, 16 levels,
12 ns). A second holds the beat's values and the activation's output. Its
data registers have no reset and nothing between a table activation's ROM
("K2C.Lut") and them, so synthesis makes the ROM a block RAM with a
synchronous read (the register becomes the RAM's output register) instead of
a deep multiplexer of LUTs after the tree. Then @ceil(log2 n)@ levels of one
comparison and one multiplexer each, each level registered, the beat
registered beside them. A stream stage on "K2C.Pipe" with
@d = 2 + ceil(log2 n)@: one beat a cycle, @d + 1@ cycles of latency with
downstream ready.
-}
module K2C.Classify
  ( classify
  , argmaxTree
  , ClassDepth
  , TreeDepth
  ) where

import Clash.Prelude

import K2C.Pipe (pipeS, stageReg)
import K2C.Stream (Stream)
import K2C.Tree (TreeDepth, treeFold)

-- | Register stages of 'classify' over @n@ values: the beat's, the activation's,
-- then the tree's.
type ClassDepth n = 2 + TreeDepth n

-- | The activation's output and the class of each beat of @n@ values.
classify
  :: forall dom n a b
   . ( HiddenClockResetEnable dom, KnownNat n, 1 <= n, Ord a, Bounded a, NFDataX a, NFDataX b )
  => (Vec n a -> b)
  -> Stream dom (Vec n a) (b, Index n)
classify activate = pipeS (SNat @(ClassDepth n)) tree
  where
    tree :: Signal dom (Maybe (Vec n a)) -> Signal dom (Maybe (b, Index n))
    tree input = fmap (\((_, out), (_, cls)) -> (out, cls)) <$> argmaxTree fst (fmap (, ()) <$> activated)
      where
        activated = stageReg (fmap (\xs -> (xs, activate xs)) <$> stageReg input)

-- | The tree of 'classify' on its own: each beat (@Nothing@: none) with the
-- maximum of its values (picked by @values@) and its index, 'TreeDepth'
-- cycles later ("K2C.Tree"). The beat rides along unchanged.
argmaxTree
  :: forall dom n a t
   . ( HiddenClockResetEnable dom, KnownNat n, 1 <= n, Ord a, Bounded a, NFDataX a, NFDataX t )
  => (t -> Vec n a)
  -> Signal dom (Maybe (t, ()))
  -> Signal dom (Maybe (t, (a, Index n)))
argmaxTree values input = treeFold better (minBound, 0) (fmap (\(t, ()) -> (t, imap (\i v -> (v, i)) (values t))) <$> input)
  where
    better (va, ia) (vb, ib) = if vb > va then (vb, ib) else (va, ia)
