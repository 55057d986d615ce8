{-# LANGUAGE DataKinds, KindSignatures, NoImplicitPrelude, ScopedTypeVariables,
             TypeApplications, TypeOperators, FlexibleContexts, NoStarIsType, TypeFamilies #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
A sequence's steps in reverse order: what a recurrent layer that reads its
sequence backwards reads (Keras' @go_backwards@, the backward half of a
@Bidirectional@), and how a backward layer's outputs return to time order.

= Hardware

* the sequence: @n@ beats in LUT RAM ('asyncRam': written as beats move in,
  read combinationally);
* a step counter @Index n@ and a mode flag (filling or sending).

= Protocol and exact timing

Filling, input ready is high (registered state only) and the beats are
written at steps @0, 1, ..@. The cycle after the @n@-th beat moved in, the
block sends: its output is the beat of step @n - 1@, then each earlier step's
from the cycle after the one before left. The cycle after step 0's beat left,
it fills again. So with downstream always ready a sequence takes @n@ cycles
in and @n@ out, one after the other.
-}
module K2C.Reverse
  ( reverseS
  ) where

import Clash.Prelude
import Data.Maybe (isJust)

import K2C.Stream (Stream)

-- | A sequence of @n@ beats played back from its last (module header).
reverseS
  :: forall dom n a
   . (HiddenClockResetEnable dom, KnownNat n, 1 <= n, NFDataX a)
  => SNat n -> Stream dom a a
reverseS SNat (input, readyOut) = (output, readyIn)
  where
    sending = register False nextSending
    count = register (0 :: Index n) nextCount
    readyIn = not <$> sending
    accepted = readyIn .&&. (isJust <$> input)
    leaves = sending .&&. readyOut
    filled = accepted .&&. ((== maxBound) <$> count)
    emptied = leaves .&&. ((== 0) <$> count)
    nextSending = mux filled (pure True) (mux emptied (pure False) sending)
    nextCount =
      mux filled count
        (mux accepted (succ <$> count)
          (mux emptied (pure 0) (mux leaves (pred <$> count) count)))
    stored = asyncRam (SNat @n) count (mux accepted (Just <$> bundle (count, fromJustX <$> input)) (pure Nothing))
    output = mux sending (Just <$> stored) (pure Nothing)
